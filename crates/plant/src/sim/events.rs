//! Time: the next event, the work done up to it, and what each kind of event does.

use super::*;

impl Plant {
    pub(super) fn next_event(&self, end: u64) -> u64 {
        let mut t = end
            .min(self.next_tick)
            .min(self.next_fast)
            .min(self.next_arrival);
        match (self.paused_until, self.pauses.first()) {
            (Some(until), _) => t = t.min(until),
            (None, Some(&(start, _))) => t = t.min(start),
            (None, None) => {}
        }
        let running = self.running_process();
        if let Some(q) = &self.quota {
            t = t.min(q.period_end);
            if !self.paused() && !q.throttled && running > 0 {
                t = t.min(self.now + q.budget.saturating_sub(q.used) / running);
            }
        }
        if !self.paused() {
            for &(_, at) in self.waking.iter().flatten() {
                t = t.min(at);
            }
            let slice = nanos(self.cfg.timeslice);
            for th in self.cpus.iter().flatten().map(|&t| &self.threads[t]) {
                if let Some(job) = &th.job {
                    t = t.min(self.now + job.remaining);
                }
                t = t.min(th.slice_start.saturating_add(slice));
            }
        }
        for th in &self.threads {
            if th.state == State::Blocked && !th.retired {
                t = t.min(th.wake_at);
            }
        }
        t.max(self.now)
    }

    /// Threads on a CPU that spend the quota.
    pub(super) fn running_process(&self) -> u64 {
        self.cpus
            .iter()
            .flatten()
            .filter(|&&t| self.threads[t].kind.under_quota())
            .count() as u64
    }

    /// Move time to `to`, every running thread's job by as much.
    pub(super) fn advance_to(&mut self, to: u64) {
        let dt = to - self.now;
        if dt > 0 && !self.paused() {
            let (mut process, mut quota) = (0, 0);
            for c in 0..self.cpus.len() {
                let Some(t) = self.cpus[c] else { continue };
                let th = &mut self.threads[t];
                let Some(job) = th.job.as_mut() else { continue };
                job.remaining -= dt.min(job.remaining);
                if th.kind.under_quota() {
                    quota += dt;
                }
                if th.kind.process() {
                    process += dt;
                } else {
                    self.neighbour_cpu += dt;
                    self.tick.neighbour += dt;
                    self.phase.neighbour += dt;
                }
                match job.task {
                    Task::Foreground { .. } | Task::Send => {
                        self.foreground_cpu += dt;
                        self.tick.foreground += dt;
                        self.phase.foreground += dt;
                    }
                    Task::Elastic { class, .. } => {
                        let long = job.len >= nanos(LONG_POLL);
                        let cl = &mut self.classes[class];
                        cl.cpu += dt;
                        cl.tick_cpu += dt;
                        cl.phase_cpu += dt;
                        if long {
                            cl.tick_long_cpu += dt;
                        }
                    }
                    Task::Burst => {}
                }
            }
            self.process_cpu += process;
            self.tick.process += process;
            self.phase.process += process;
            if let Some(q) = &mut self.quota {
                q.used += quota;
            }
        }
        self.now = to;
        self.clock.set(Duration::from_nanos(to));
    }

    pub(super) fn handle_events<S: Steering + ?Sized>(&mut self, steering: &mut S) {
        let now = self.now;
        if self.paused_until.is_some_and(|u| u <= now) {
            self.paused_until = None;
        }
        while self.paused_until.is_none() && self.pauses.first().is_some_and(|p| p.0 <= now) {
            let (_, end) = self.pauses.remove(0);
            if end > now {
                self.paused_until = Some(end);
            }
        }
        self.quota_events();
        if !self.paused() {
            for c in 0..self.cpus.len() {
                if let Some(t) = self.cpus[c] {
                    if self.threads[t].job.is_some_and(|j| j.remaining == 0) {
                        self.complete(t);
                    }
                }
            }
            self.timeslices();
        }
        for t in 0..self.threads.len() {
            let th = &self.threads[t];
            if th.state == State::Blocked && !th.retired && th.wake_at <= now {
                self.threads[t].wake_at = NEVER;
                self.start_burst(t);
                self.make_ready(t);
            }
        }
        while self.next_arrival <= now {
            let service = self.service();
            let arrived = self.next_arrival;
            self.arrivals += 1;
            self.tick.arrivals += 1;
            self.phase.arrivals += 1;
            let request = Task::Foreground {
                arrived,
                woken: arrived,
                service,
            };
            self.client_burst();
            if self.cfg.io_driver {
                // Readable: the OS wakes the worker parked in the driver, if one is.
                self.socket.push_back(request);
                if let Some(w) = self.driver.take() {
                    if self.threads[w].state == State::Blocked {
                        self.make_ready(w);
                    }
                }
            } else {
                let worker = self.running_worker();
                self.push(request, RunsOn::Runtime, worker);
            }
            self.next_arrival = arrived.saturating_add(self.gap());
        }
        if self.next_fast <= now {
            self.next_fast = now.saturating_add(nanos(self.cfg.fast_interval));
            let obs = FastObservation {
                now: Duration::from_nanos(now),
                process_cpu: Duration::from_nanos(self.process_cpu),
                backlog_age: self.backlog_age(),
            };
            if let Some(commands) = steering.between(obs.now, &obs) {
                self.apply(&commands);
            }
        }
        if self.next_tick <= now {
            self.next_tick = now.saturating_add(nanos(self.cfg.tick));
            self.do_tick(steering);
        }
    }

    /// Period ends (the quota refills, throttling lifts) and a quota running out (every
    /// thread of the process leaves its CPU until the period ends).
    pub(super) fn quota_events(&mut self) {
        let now = self.now;
        let running = self.running_process();
        let Some(q) = &mut self.quota else { return };
        while q.period_end <= now {
            self.periods.push(Duration::from_nanos(q.used));
            q.used = 0;
            q.throttled = false;
            q.period_end = q.period_end.saturating_add(nanos(q.quota.period));
        }
        let left = q.budget.saturating_sub(q.used);
        // Less than a nanosecond per running thread left is spent: no event could land on it.
        if !q.throttled && (left == 0 || left < running) {
            q.throttled = true;
            self.throttled_periods += 1;
            self.phase.throttled += 1;
            self.tick.throttled = true;
            for c in (0..self.cpus.len()).rev() {
                if let Some(t) = self.cpus[c] {
                    if self.threads[t].kind.under_quota() {
                        self.preempt(t, true);
                    }
                }
            }
        }
    }

    /// A running thread whose timeslice is over goes to the back of its ready queue if a
    /// thread that may take its CPU waits; else it runs on for another slice.
    pub(super) fn timeslices(&mut self) {
        let slice = nanos(self.cfg.timeslice);
        for c in 0..self.cpus.len() {
            let Some(t) = self.cpus[c] else { continue };
            if self.threads[t].slice_start.saturating_add(slice) > self.now {
                continue;
            }
            // Real-time threads run until they block.
            let class = self.threads[t].kind.class();
            if class == REALTIME {
                self.threads[t].slice_start = self.now;
                continue;
            }
            let waiter = (class..self.ready.len()).any(|k| self.first_eligible(k).is_some());
            if waiter {
                self.preempt(t, false);
            } else {
                self.threads[t].slice_start = self.now;
            }
        }
    }

    /// The job on running thread `t` is done: account it, then take the next one or park.
    pub(super) fn complete(&mut self, t: usize) {
        let Some(job) = self.threads[t].job.take() else {
            return;
        };
        match job.task {
            Task::Foreground { arrived, .. } => {
                let _ = self.phase.response.record((self.now - arrived).max(1));
                // The client reads the response.
                self.client_burst();
            }
            Task::Elastic { class, task, .. } => self.poll_done(class, task, job.len, t),
            Task::Send => {}
            Task::Burst => {
                let duty = self
                    .neighbour
                    .map_or(0.0, |n| n.cpus / n.threads.max(1) as f64);
                if duty >= 1.0 {
                    self.start_burst(t);
                    return;
                }
                let wake = if duty > 0.0 {
                    let mean = job.len as f64 * (1.0 - duty) / duty;
                    self.now.saturating_add(self.exp(mean))
                } else {
                    NEVER
                };
                self.unschedule(t);
                self.threads[t].wake_at = wake;
                return;
            }
        }
        if !self.ensure_job(t) {
            self.unschedule(t);
        }
    }

    /// Half the client's CPU for a request (it sends the request, then reads the response),
    /// on one of its threads: a parked one is woken unless enough awake ones look for work.
    pub(super) fn client_burst(&mut self) {
        let Some(client) = self.cfg.client else {
            return;
        };
        self.sends.push_back((nanos(client.per_request) / 2).max(1));
        self.wake_for(Kind::Client, self.sends.len());
    }

    pub(super) fn backlog_age(&self) -> Duration {
        self.inject
            .iter()
            .chain(self.locals.iter().flatten())
            .chain(self.lifo.iter().filter_map(|(t, _)| t.as_ref()))
            .filter_map(|task| match *task {
                Task::Foreground { arrived, .. } => Some(self.now - arrived),
                _ => None,
            })
            .max()
            .map_or(Duration::ZERO, Duration::from_nanos)
    }
}
