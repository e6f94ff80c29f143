//! The OS and the runtime: threads on CPUs, their timeslices and priorities, and tokio-like
//! workers taking tasks from their LIFO slots, local queues and the inject queue.

use super::*;

/// Polls a worker takes from its LIFO slot in a row before it looks at its queues (tokio's).
const MAX_LIFO_POLLS: u8 = 3;

impl Plant {
    pub(super) fn paused(&self) -> bool {
        self.paused_until.is_some()
    }

    pub(super) fn throttled(&self) -> bool {
        self.quota.as_ref().is_some_and(|q| q.throttled)
    }

    pub(super) fn eligible(&self, t: usize) -> bool {
        !(self.threads[t].kind.process() && self.throttled())
    }

    pub(super) fn make_ready(&mut self, t: usize) {
        let th = &mut self.threads[t];
        th.state = State::Ready;
        th.ready_since = self.now;
        if th.kind.idle() {
            self.ready_idle.push_back(t);
        } else {
            self.ready_normal.push_back(t);
        }
    }

    /// Off its CPU and out of the ready queues, blocked.
    pub(super) fn unschedule(&mut self, t: usize) {
        match self.threads[t].state {
            State::Running(c) => self.cpus[c] = None,
            State::Ready => {
                self.ready_normal.retain(|&x| x != t);
                self.ready_idle.retain(|&x| x != t);
            }
            State::Blocked => {}
        }
        self.threads[t].state = State::Blocked;
    }

    /// Off its CPU, runnable, at the front (throttled, or an idle thread preempted) or the
    /// back (its timeslice ended) of its ready queue.
    pub(super) fn preempt(&mut self, t: usize, front: bool) {
        if let State::Running(c) = self.threads[t].state {
            self.cpus[c] = None;
        }
        let th = &mut self.threads[t];
        th.state = State::Ready;
        th.ready_since = self.now;
        let q = if th.kind.idle() {
            &mut self.ready_idle
        } else {
            &mut self.ready_normal
        };
        if front {
            q.push_front(t);
        } else {
            q.push_back(t);
        }
    }

    pub(super) fn first_eligible(&self, idle: bool) -> Option<usize> {
        let q = if idle {
            &self.ready_idle
        } else {
            &self.ready_normal
        };
        q.iter().position(|&t| self.eligible(t))
    }

    /// Put `t` on CPU `c`, counting its wait in the run queue.
    pub(super) fn put_on(&mut self, c: usize, t: usize) {
        let delay = self.now - self.threads[t].ready_since;
        match self.threads[t].kind {
            Kind::Worker => add(&mut self.readings.workers, delay),
            Kind::Neighbour => add(&mut self.readings.bystanders, delay),
            Kind::Pool => {}
        }
        self.cpus[c] = Some(t);
        let th = &mut self.threads[t];
        th.state = State::Running(c);
        th.slice_start = self.now;
    }

    /// Give free CPUs to ready threads (normal first), let a ready normal thread take a CPU
    /// from an idle-priority one, and park threads that find no work when they get a CPU.
    pub(super) fn dispatch(&mut self) {
        if self.paused() {
            return;
        }
        loop {
            let mut parked = false;
            for c in 0..self.cpus.len() {
                if self.cpus[c].is_some() {
                    continue;
                }
                let t = if let Some(i) = self.first_eligible(false) {
                    self.ready_normal.remove(i)
                } else if let Some(i) = self.first_eligible(true) {
                    self.ready_idle.remove(i)
                } else {
                    break;
                };
                let Some(t) = t else { break };
                self.put_on(c, t);
                if !self.ensure_job(t) {
                    self.unschedule(t);
                    parked = true;
                }
            }
            while let Some(i) = self.first_eligible(false) {
                if self.cpus.contains(&None) {
                    // A worker just parked: fill its CPU before preempting anyone.
                    parked = true;
                    break;
                }
                let Some(c) = (0..self.cpus.len())
                    .find(|&c| self.cpus[c].is_some_and(|t| self.threads[t].kind.idle()))
                else {
                    break;
                };
                if let Some(idle) = self.cpus[c] {
                    self.preempt(idle, true);
                }
                let Some(t) = self.ready_normal.remove(i) else {
                    break;
                };
                self.put_on(c, t);
                if !self.ensure_job(t) {
                    self.unschedule(t);
                    parked = true;
                }
            }
            if !parked {
                break;
            }
        }
    }

    /// Whether `t` has a job, taking the next task of its run queue if it had none.
    pub(super) fn ensure_job(&mut self, t: usize) -> bool {
        if self.threads[t].job.is_some() {
            return true;
        }
        let task = match self.threads[t].kind {
            Kind::Worker => self.next_task(t),
            Kind::Pool => self.pool_queue.pop_front(),
            Kind::Neighbour => None,
        };
        let Some(task) = task else { return false };
        let len = match task {
            Task::Foreground { arrived, service } => {
                let wait = (self.now - arrived).max(1);
                let _ = self.readings.sched.record(wait);
                let _ = self.readings.all.record(wait);
                let _ = self.phase.sched.record(wait);
                service
            }
            Task::Elastic { class, since, .. } => {
                if self.threads[t].kind == Kind::Worker {
                    let _ = self.readings.all.record((self.now - since).max(1));
                }
                nanos(self.classes[class].cfg.poll).max(1)
            }
            Task::Burst => 1,
        };
        self.threads[t].job = Some(Job {
            task,
            remaining: len,
            len,
        });
        true
    }

    /// Queue `task` for the pool, or the runtime's inject queue, or worker `local`'s queue;
    /// then wake a parked thread if none awake is looking for work.
    pub(super) fn push(&mut self, task: Task, placement: RunsOn, local: Option<usize>) {
        let kind = match placement {
            RunsOn::Runtime => {
                match local {
                    Some(w) if w < self.locals.len() && matches!(task, Task::Foreground { .. }) => {
                        if let Some(before) = self.lifo[w].0.replace(task) {
                            self.locals[w].push_back(before);
                        }
                    }
                    Some(w) if w < self.locals.len() => self.locals[w].push_back(task),
                    _ => self.inject.push_back(task),
                }
                Kind::Worker
            }
            RunsOn::Pool => {
                self.pool_queue.push_back(task);
                Kind::Pool
            }
        };
        let looking = self
            .threads
            .iter()
            .any(|th| th.kind == kind && th.state != State::Blocked && th.job.is_none());
        if !looking {
            if let Some(t) = self
                .threads
                .iter()
                .position(|th| th.kind == kind && th.state == State::Blocked)
            {
                self.make_ready(t);
            }
        }
    }

    /// The next task for worker `w`: as a tokio worker looks for one.
    pub(super) fn next_task(&mut self, w: usize) -> Option<Task> {
        self.polls[w] += 1;
        let (slot, in_a_row) = &mut self.lifo[w];
        if *in_a_row < MAX_LIFO_POLLS {
            if let Some(task) = slot.take() {
                *in_a_row += 1;
                return Some(task);
            }
        }
        *in_a_row = 0;
        if let Some(task) = slot.take() {
            // Over its run: the slot's task waits its turn in the local queue.
            self.locals[w].push_back(task);
        }
        if self.polls[w].is_multiple_of(61) {
            if let Some(task) = self.inject.pop_front() {
                return Some(task);
            }
        }
        if let Some(task) = self.locals[w].pop_front() {
            return Some(task);
        }
        if let Some(task) = self.inject.pop_front() {
            return Some(task);
        }
        let n = self.locals.len();
        let victim = (1..n)
            .map(|i| (w + i) % n)
            .find(|&v| !self.locals[v].is_empty())?;
        let take = self.locals[victim].len().div_ceil(2);
        let stolen: Vec<Task> = self.locals[victim].drain(..take).collect();
        self.locals[w].extend(stolen);
        self.locals[w].pop_front()
    }

    /// A worker on a CPU, as the one that polled the I/O driver: picked at random.
    pub(super) fn running_worker(&mut self) -> Option<usize> {
        let running = self
            .cpus
            .iter()
            .flatten()
            .filter(|&&t| self.threads[t].kind == Kind::Worker)
            .count();
        if running == 0 {
            return None;
        }
        let pick = self.rng.usize(..running);
        self.cpus
            .iter()
            .flatten()
            .copied()
            .filter(|&t| self.threads[t].kind == Kind::Worker)
            .nth(pick)
    }

    pub(super) fn start_burst(&mut self, t: usize) {
        let len = self.neighbour.map_or(1, |n| nanos(n.burst).max(1));
        self.threads[t].job = Some(Job {
            task: Task::Burst,
            remaining: len,
            len,
        });
    }
}
