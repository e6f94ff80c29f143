//! The elastic loops (grant, polls, settle) and the steering each tick and between ticks.

use super::*;

impl Plant {
    /// Task `task` of `class` asks for its next grant (running on worker `local`, if given).
    pub(super) fn admit(&mut self, class: usize, task: usize, local: Option<usize>) {
        let cl = &mut self.classes[class];
        let next = match cl.queue.admit(cl.cfg.slice) {
            Admit::Granted(grant) => Loop::Holding { grant, used: 0 },
            Admit::Queued(ticket) => Loop::Waiting(ticket),
        };
        let granted = matches!(next, Loop::Holding { .. });
        cl.tasks[task] = next;
        if granted {
            self.push_poll(class, task, local);
        }
    }

    /// Queue the next poll of task `task` of `class` (on worker `local`'s queue if given).
    pub(super) fn push_poll(&mut self, class: usize, task: usize, local: Option<usize>) {
        let placement = self.classes[class].cfg.placement;
        let since = self.now;
        self.push(Task::Elastic { class, task, since }, placement, local);
    }

    /// Collect the grants the queue of `class` handed to waiting tasks.
    pub(super) fn collect(&mut self, class: usize) {
        for task in 0..self.classes[class].tasks.len() {
            let Loop::Waiting(ticket) = &mut self.classes[class].tasks[task] else {
                continue;
            };
            match ticket.poll_grant(Waker::noop()) {
                Poll::Pending => {}
                Poll::Ready(Ok(grant)) => {
                    self.classes[class].tasks[task] = Loop::Holding { grant, used: 0 };
                    self.push_poll(class, task, None);
                }
                Poll::Ready(Err(_)) => self.classes[class].tasks[task] = Loop::Done,
            }
        }
    }

    /// A poll of `len` ended on thread `t`: poll again while the grant lasts, else settle and
    /// ask again.
    pub(super) fn poll_done(&mut self, class: usize, task: usize, len: u64, t: usize) {
        let cl = &mut self.classes[class];
        let Loop::Holding { grant, used } = &mut cl.tasks[task] else {
            return;
        };
        *used += len;
        if *used < grant.allotted_nanos() && !cl.braking {
            self.push_poll(class, task, Some(t));
            return;
        }
        if let Loop::Holding { grant, used } = std::mem::replace(&mut cl.tasks[task], Loop::Done) {
            cl.queue.done(grant, Duration::from_nanos(used));
        }
        self.admit(class, task, Some(t));
        self.collect(class);
    }

    // --- steering ---

    pub(super) fn apply(&mut self, commands: &[ClassCommand]) {
        for (class, cmd) in commands.iter().enumerate().take(self.classes.len()) {
            let cl = &mut self.classes[class];
            // The cap first: the grants a new rate hands out respect it.
            cl.queue.set_max_holders(cmd.max_holders);
            if cmd.retune {
                cl.queue.retune(cmd.rate);
            } else {
                cl.queue.set_rate(cmd.rate);
            }
            cl.braking = cmd.held && cmd.braking;
            if cmd.held != cl.held {
                cl.held = cmd.held;
                if cmd.held {
                    cl.queue.pause();
                } else {
                    cl.queue.resume();
                }
            }
            self.collect(class);
        }
    }

    pub(super) fn do_tick<S: Steering + ?Sized>(&mut self, steering: &mut S) {
        let mut classes = Vec::with_capacity(self.classes.len());
        for class in 0..self.classes.len() {
            let waited = self.classes[class].queue.tick();
            self.collect(class);
            let cl = &mut self.classes[class];
            if cl.recent.len() == self.cfg.probe_window {
                cl.recent.pop_front();
            }
            cl.recent.push_back((cl.tick_cpu, cl.tick_long_cpu));
            let (cpu, long) = cl.recent.iter().fold((0, 0), |a, b| (a.0 + b.0, a.1 + b.1));
            let snap = cl.queue.snapshot();
            classes.push(ClassObservation {
                cpu: Duration::from_nanos(cl.cpu),
                waited,
                waiters: snap.waiters,
                holders: snap.holders,
                has_tokens: snap.balance_nanos > 0,
                long_polls: long * 2 > cpu,
                rate: snap.rate_nanos_per_sec,
            });
        }
        self.history.push(&self.readings);
        let window = self.cfg.probe_window;
        let throttled = self.tick.throttled || self.throttled();
        let period = self.cfg.tick;
        let obs = Observation {
            now: Duration::from_nanos(self.now),
            period,
            cpus: self.cfg.cpus as f64,
            quota: self.cfg.quota,
            throttled_periods: self.throttled_periods,
            throttled,
            process_cpu: Duration::from_nanos(self.process_cpu),
            arrivals_per_sec: self.tick.arrivals as f64 / period.as_secs_f64(),
            sched_p99: None,
            run_queue_delay: None,
            bystander_delay: None,
            classes,
            history: &self.history,
        };
        let obs = Observation {
            sched_p99: obs.sched_p99_over(window),
            run_queue_delay: obs.run_queue_delay_over(window),
            bystander_delay: obs.bystander_delay_over(window),
            ..obs
        };
        let sched_p99 = obs.sched_p99;
        let commands = steering.tick(&obs);
        self.apply(&commands);
        let record = PlantTick {
            now: Duration::from_nanos(self.now),
            process_cpu: Duration::from_nanos(self.tick.process),
            neighbour_cpu: Duration::from_nanos(self.tick.neighbour),
            foreground_cpu: Duration::from_nanos(self.tick.foreground),
            class_cpu: self
                .classes
                .iter()
                .map(|c| Duration::from_nanos(c.tick_cpu))
                .collect(),
            class_rate: self.classes.iter().map(|c| c.queue.rate()).collect(),
            sched_p99,
            throttled,
        };
        self.trace.push(record);
        self.tick = TickAcc::default();
        self.readings.reset();
        for c in &mut self.classes {
            c.tick_cpu = 0;
            c.tick_long_cpu = 0;
        }
    }
}
