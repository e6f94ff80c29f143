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
        !(self.threads[t].kind.under_quota() && self.throttled())
    }

    pub(super) fn make_ready(&mut self, t: usize) {
        if self.driver == Some(t) {
            // Woken for other work: out of the driver until it parks again.
            self.driver = None;
        }
        let th = &mut self.threads[t];
        th.state = State::Ready;
        th.ready_since = self.now;
        self.ready[th.kind.class()].push_back(t);
    }

    /// Off its CPU and out of the ready queues, blocked.
    pub(super) fn unschedule(&mut self, t: usize) {
        self.cancel_wake(t);
        match self.threads[t].state {
            State::Running(c) => {
                self.cpus[c] = None;
                self.idle_since[c] = self.now;
            }
            State::Ready => {
                for q in &mut self.ready {
                    q.retain(|&x| x != t);
                }
            }
            State::Blocked => {}
        }
        self.threads[t].state = State::Blocked;
    }

    /// Off its CPU, runnable, at the front (throttled, or preempted by a higher class) or the
    /// back (its timeslice ended) of its ready queue.
    pub(super) fn preempt(&mut self, t: usize, front: bool) {
        if let State::Running(c) = self.threads[t].state {
            self.cpus[c] = None;
            self.idle_since[c] = self.now;
        }
        let th = &mut self.threads[t];
        th.state = State::Ready;
        th.ready_since = self.now;
        let q = &mut self.ready[th.kind.class()];
        if front {
            q.push_front(t);
        } else {
            q.push_back(t);
        }
    }

    /// The place in its class's ready queue of the first thread of `class` that may run.
    pub(super) fn first_eligible(&self, class: usize) -> Option<usize> {
        self.ready[class].iter().position(|&t| self.eligible(t))
    }

    /// The highest class with a thread that may run, and its place in that queue.
    fn first_ready(&self) -> Option<(usize, usize)> {
        (0..self.ready.len())
            .rev()
            .find_map(|class| self.first_eligible(class).map(|i| (class, i)))
    }

    /// Put `t` on CPU `c`, counting its wait in the run queue.
    pub(super) fn put_on(&mut self, c: usize, t: usize) {
        let delay = self.now - self.threads[t].ready_since;
        match self.threads[t].kind {
            Kind::Worker => add(&mut self.readings.workers, delay),
            Kind::Neighbour | Kind::Client => add(&mut self.readings.bystanders, delay),
            Kind::Pool => {}
        }
        self.cpus[c] = Some(t);
        let th = &mut self.threads[t];
        th.state = State::Running(c);
        th.slice_start = self.now;
    }

    /// A thread woken onto an idle CPU that has not started there yet goes back to the front
    /// of its ready queue.
    fn cancel_wake(&mut self, t: usize) {
        for c in 0..self.waking.len() {
            if self.waking[c].is_some_and(|(w, _)| w == t) {
                self.waking[c] = None;
                if self.threads[t].state == State::Ready {
                    self.ready[self.threads[t].kind.class()].push_front(t);
                }
            }
        }
    }

    /// A CPU no thread runs on or is waking onto.
    fn free_cpu(&self) -> bool {
        (0..self.cpus.len()).any(|c| self.cpus[c].is_none() && self.waking[c].is_none())
    }

    /// Give free CPUs to ready threads (the highest class first), let a ready thread take the
    /// CPU of one of a lower class, and park threads that find no work when they get a CPU. A
    /// thread given an idle CPU starts there [`wake_up`](PlantConfig::wake_up) later.
    pub(super) fn dispatch(&mut self) {
        if self.paused() {
            return;
        }
        let wake_up = nanos(self.cfg.wake_up);
        loop {
            let mut parked = false;
            for c in 0..self.cpus.len() {
                if self.cpus[c].is_some() {
                    continue;
                }
                let t = match self.waking[c] {
                    Some((t, at)) if at <= self.now => {
                        if !self.eligible(t) {
                            self.cancel_wake(t);
                            continue;
                        }
                        self.waking[c] = None;
                        t
                    }
                    Some(_) => continue,
                    None => {
                        let Some((class, i)) = self.first_ready() else {
                            continue;
                        };
                        let Some(t) = self.ready[class].remove(i) else {
                            continue;
                        };
                        // A CPU idle for less than its wake-up has not halted yet.
                        if wake_up > 0 && self.now - self.idle_since[c] >= wake_up {
                            self.waking[c] = Some((t, self.now + wake_up));
                            continue;
                        }
                        t
                    }
                };
                self.put_on(c, t);
                if !self.ensure_job(t) {
                    self.unschedule(t);
                    parked = true;
                }
            }
            while let Some((class, i)) = self.first_ready() {
                if self.free_cpu() {
                    // A thread just parked: fill its CPU before preempting anyone.
                    parked = true;
                    break;
                }
                // The CPU of the lowest class running below it.
                let Some(c) = (0..self.cpus.len())
                    .filter(|&c| self.cpus[c].is_some_and(|r| self.threads[r].kind.class() < class))
                    .min_by_key(|&c| self.cpus[c].map(|r| self.threads[r].kind.class()))
                else {
                    break;
                };
                if let Some(low) = self.cpus[c] {
                    self.preempt(low, true);
                }
                let Some(t) = self.ready[class].remove(i) else {
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
            Kind::Worker => {
                let task = self.next_task(t);
                if task.is_none() && self.cfg.io_driver && self.driver.is_none() {
                    // It parks in the driver.
                    self.driver = Some(t);
                }
                task
            }
            Kind::Pool => self.pool_queue.pop_front(),
            Kind::Client => {
                let Some(len) = self.sends.pop_front() else {
                    return false;
                };
                self.threads[t].job = Some(Job {
                    task: Task::Send,
                    remaining: len,
                    len,
                });
                return true;
            }
            Kind::Neighbour => None,
        };
        let Some(task) = task else { return false };
        let len = match task {
            Task::Foreground { woken, service, .. } => {
                let wait = (self.now - woken).max(1);
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
            Task::Burst | Task::Send => 1,
        };
        self.threads[t].job = Some(Job {
            task,
            remaining: len,
            len,
        });
        true
    }

    /// Queue `task` for the pool, or the runtime's inject queue, or worker `local`'s queue (a
    /// yielded elastic poll: its deferred list); then wake a parked thread to take it.
    pub(super) fn push(&mut self, task: Task, placement: RunsOn, local: Option<usize>) {
        let kind = match placement {
            RunsOn::Runtime => {
                match local {
                    Some(w) if w < self.locals.len() && matches!(task, Task::Foreground { .. }) => {
                        if let Some(before) = self.lifo[w].0.replace(task) {
                            self.locals[w].push_back(before);
                        }
                    }
                    Some(w) if w < self.locals.len() => {
                        // An elastic poll that yielded: the worker's own, until it runs dry.
                        self.deferred[w].push_back(task);
                        return;
                    }
                    _ => self.inject.push_back(task),
                }
                Kind::Worker
            }
            RunsOn::Pool => {
                self.pool_queue.push_back(task);
                Kind::Pool
            }
        };
        // The runtime's workers steal from each other: one awake and looking is enough. The
        // pool's threads share one queue: a parked one is woken for each task more than the
        // threads looking will take.
        let queued = match kind {
            Kind::Pool => self.pool_queue.len(),
            _ => 1,
        };
        self.wake_for(kind, queued);
    }

    /// Wake a parked thread of `kind` if fewer of its threads look for work (awake, no job)
    /// than `queued` tasks wait.
    pub(super) fn wake_for(&mut self, kind: Kind, queued: usize) {
        let looking = self
            .threads
            .iter()
            .filter(|th| th.kind == kind && th.state != State::Blocked && th.job.is_none())
            .count();
        if looking >= queued {
            return;
        }
        if let Some(t) = self
            .threads
            .iter()
            .position(|th| th.kind == kind && th.state == State::Blocked && !th.retired)
        {
            self.make_ready(t);
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
            // The maintenance tick polls the driver, then wakes the deferred tasks.
            self.poll_driver(w);
            self.wake_deferred(w);
            let task = self.take_local(w);
            self.notify_parked(w);
            if task.is_some() {
                return task;
            }
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
            .find(|&v| !self.locals[v].is_empty());
        let Some(victim) = victim else {
            // Nothing anywhere: the worker polls the driver (without parking if it has
            // deferred tasks), then wakes those.
            self.poll_driver(w);
            self.wake_deferred(w);
            let task = self.take_local(w);
            self.notify_parked(w);
            return task;
        };
        let take = self.locals[victim].len().div_ceil(2);
        let stolen: Vec<Task> = self.locals[victim].drain(..take).collect();
        self.locals[w].extend(stolen);
        self.locals[w].pop_front()
    }

    /// Worker `w`'s LIFO slot, else the front of its local queue.
    fn take_local(&mut self, w: usize) -> Option<Task> {
        if let Some(task) = self.lifo[w].0.take() {
            self.lifo[w].1 = 1;
            return Some(task);
        }
        self.locals[w].pop_front()
    }

    /// Worker `w` polls the I/O driver (with one): every request sent since is woken on it,
    /// each into its LIFO slot (the one there goes to the back of the local queue). With more
    /// than one, a parked worker is woken to steal, unless an awake one looks for work.
    pub(super) fn poll_driver(&mut self, w: usize) {
        if !self.cfg.io_driver || self.socket.is_empty() {
            return;
        }
        let now = self.now;
        let several = self.socket.len() > 1;
        while let Some(mut task) = self.socket.pop_front() {
            if let Task::Foreground { woken, .. } = &mut task {
                *woken = now;
            }
            if let Some(before) = self.lifo[w].0.replace(task) {
                self.locals[w].push_back(before);
            }
        }
        if several {
            self.notify_parked(w);
        }
    }

    /// Worker `w` queued tasks another worker could steal: a parked worker is woken to, unless
    /// an awake one looks for work (tokio's `notify_parked_local`).
    fn notify_parked(&mut self, w: usize) {
        if self.locals[w].is_empty() {
            return;
        }
        let looking = (0..self.threads.len()).any(|t| {
            let th = &self.threads[t];
            t != w && th.kind == Kind::Worker && th.state != State::Blocked && th.job.is_none()
        });
        if looking {
            return;
        }
        if let Some(t) = (0..self.threads.len()).find(|&t| {
            self.threads[t].kind == Kind::Worker && self.threads[t].state == State::Blocked
        }) {
            self.make_ready(t);
        }
    }

    /// Worker `w`'s deferred tasks woken, in order, to the back of its local queue: runnable
    /// (and stealable) from now.
    pub(super) fn wake_deferred(&mut self, w: usize) {
        let now = self.now;
        while let Some(mut task) = self.deferred[w].pop_front() {
            if let Task::Elastic { since, .. } = &mut task {
                *since = now;
            }
            self.locals[w].push_back(task);
        }
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
