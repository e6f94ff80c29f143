//! The JSON report: the schema of issue 5 (`machine`, `phases`, `timeline`), and the extras
//! kept beside it rather than in its objects.

use super::{PhaseResult, Report};
use std::fmt::Write as _;

fn jstr(s: &str) -> String {
    let mut o = String::with_capacity(s.len() + 2);
    o.push('"');
    for c in s.chars() {
        match c {
            '"' => o.push_str("\\\""),
            '\\' => o.push_str("\\\\"),
            '\n' => o.push_str("\\n"),
            '\r' => o.push_str("\\r"),
            '\t' => o.push_str("\\t"),
            c if (c as u32) < 0x20 => {
                let _ = write!(o, "\\u{:04x}", c as u32);
            }
            c => o.push(c),
        }
    }
    o.push('"');
    o
}

fn jnum(x: f64) -> String {
    if x.is_finite() {
        let r = (x * 1000.0).round() / 1000.0;
        if r == r.trunc() && r.abs() < 1e15 {
            format!("{}", r as i64)
        } else {
            format!("{r}")
        }
    } else {
        "null".into()
    }
}

fn jopt(x: Option<f64>) -> String {
    x.map(jnum).unwrap_or_else(|| "null".into())
}

impl Report {
    pub fn to_json(&self) -> String {
        let m = &self.machine;
        let mut s = String::new();
        s.push_str("{\n  \"machine\": {");
        let _ = write!(
            s,
            "\"cpus\": {}, \"workers\": {}, \"cpus_used\": {}, \"os\": {}, \"arch\": {}, \"tokio_unstable\": {}, \
             \"fg_rate_per_sec\": {}, \"fg_work_us\": {}, \"fg_process_cpu_per_request_us\": {}, \"fg_connections\": {}, \
             \"elastic_tasks\": {}, \"table_rows\": {}, \"chunk_rows\": {}, \"chunk_cpu_us\": {}, \"rows_per_cpu_sec\": {}, \
             \"phase_secs\": {}, \"warmup_secs\": {}, \"target_p99_us\": {}, \"target_source\": {}, \"slice_ms\": {}, \"quantum_us\": {}, \"static_limit\": {}, \"rounds\": {}, \"command\": {}",
            m.cpus,
            m.workers,
            jnum(m.cpus_used),
            jstr(&m.os),
            jstr(&m.arch),
            m.tokio_unstable,
            jnum(m.rate),
            jnum(m.work_us),
            jopt(m.per_request_cpu_us),
            m.conns,
            m.elastic_tasks,
            m.rows,
            m.chunk_rows,
            jnum(m.chunk_cpu_us),
            jnum(m.rows_per_cpu_sec),
            jnum(m.phase_secs),
            jnum(m.warmup_secs),
            jopt(m.target_us.map(|t| t as f64)),
            jstr(&m.target_source),
            m.slice_ms,
            m.quantum_us,
            jnum(m.static_limit),
            self.rounds(),
            jstr(&m.command)
        );
        s.push_str("},\n  \"phases\": [");
        let ran: Vec<&PhaseResult> = self.phases.iter().filter(|p| p.skipped.is_none()).collect();
        for (i, p) in ran.iter().enumerate() {
            let _ = write!(
                s,
                "{}\n    {{\"name\": {}, \"fg\": {{\"requests\": {}, \"p50_us\": {}, \"p99_us\": {}, \"p999_us\": {}, \"max_us\": {}}}, \
                 \"sched\": {{\"p99_us\": {}}}, \"elastic\": {{\"rows_per_sec\": {}, \"cpu_share\": {}}}, \
                 \"limit\": {{\"mean\": {}, \"min\": {}, \"max\": {}}}}}",
                if i == 0 { "" } else { "," },
                jstr(&p.name),
                p.requests,
                jopt(p.p50_us),
                jopt(p.p99_us),
                jopt(p.p999_us),
                jopt(p.max_us),
                jopt(p.sched_p99_us),
                jnum(p.rows_per_sec),
                jnum(p.cpu_share),
                jopt(p.limit_mean),
                jopt(p.limit_min),
                jopt(p.limit_max)
            );
        }
        s.push_str("\n  ],\n  \"timeline\": [");
        for (i, t) in self.timeline.iter().enumerate() {
            let _ = write!(
                s,
                "{}\n    {{\"t_ms\": {}, \"phase\": {}, \"limit\": {}, \"sched_p99_us\": {}, \"fg_p99_us\": {}, \"elastic_rows_per_sec\": {}}}",
                if i == 0 { "" } else { "," },
                t.t_ms,
                jstr(&t.phase),
                jopt(t.limit),
                jopt(t.sched_p99_us),
                jopt(t.fg_p99_us),
                jnum(t.elastic_rows_per_sec)
            );
        }
        s.push_str("\n  ],\n");
        // Extras beyond the issue's schema, kept out of the phase and timeline objects.
        s.push_str("  \"timeline_sched_split\": [");
        for (i, t) in self.timeline.iter().enumerate() {
            let _ = write!(
                s,
                "{}\n    {{\"t_ms\": {}, \"sched_fg_p99_us\": {}, \"sched_elastic_p99_us\": {}}}",
                if i == 0 { "" } else { "," },
                t.t_ms,
                jopt(t.sched_fg_p99_us),
                jopt(t.sched_elastic_p99_us)
            );
        }
        s.push_str("\n  ],\n");
        s.push_str("  \"phase_extras\": [");
        for (i, p) in self.phases.iter().enumerate() {
            let _ = write!(
                s,
                "{}\n    {{\"name\": {}, \"skipped\": {}, \"rounds_fg_p99_us\": [{}], \"fg_p99_median_of_rounds_us\": {}, \
                 \"cpu_share_from_rows\": {}, \"measured_secs\": {}, \"unanswered\": {}, \"process_cpu_share\": {}, \"machine_busy_share\": {}, \"pacer_used_share\": {}, \
                 \"pauses\": {}, \"paused_ms\": {}, \"requests_left_out\": {}, \"fg_p99_with_pauses_us\": {}, \"brakes\": {}}}",
                if i == 0 { "" } else { "," },
                jstr(&p.name),
                p.skipped.as_deref().map(jstr).unwrap_or("null".into()),
                p.p99_rounds.iter().map(|x| jnum(*x)).collect::<Vec<_>>().join(", "),
                jopt(p.p99_median),
                jopt(p.cpu_share_from_rows),
                jnum(p.measured_secs),
                p.unanswered,
                jopt(p.process_cpu_share),
                jopt(p.machine_busy_share),
                jopt(p.used_share),
                p.pauses,
                jnum(p.paused_ms),
                p.left_out,
                jopt(p.raw_p99_us),
                p.brakes
            );
        }
        s.push_str("\n  ],\n  \"segments\": [");
        for (i, p) in self.segments.iter().enumerate() {
            let _ = write!(
                s,
                "{}\n    {{\"name\": {}, \"round\": {}, \"skipped\": {}, \"interrupted\": {}, \"start_ms\": {}, \"end_ms\": {}, \"step_ms\": [{}], \
                 \"measured_secs\": {}, \"requests\": {}, \"fg_p50_us\": {}, \"fg_p99_us\": {}, \"sched_p99_us\": {}, \"rows_per_sec\": {}, \
                 \"limit_mean\": {}, \"unanswered\": {}, \"process_cpu_share\": {}, \"machine_busy_share\": {}, \"pacer_used_share\": {}}}",
                if i == 0 { "" } else { "," },
                jstr(&p.name),
                p.round + 1,
                p.skipped.as_deref().map(jstr).unwrap_or("null".into()),
                p.interrupted,
                p.start_ms,
                p.end_ms,
                p.step_ms
                    .iter()
                    .map(|x| x.to_string())
                    .collect::<Vec<_>>()
                    .join(", "),
                jnum(p.measured_secs),
                p.requests,
                jopt(p.p50_us),
                jopt(p.p99_us),
                jopt(p.sched_p99_us),
                jnum(p.rows_per_sec),
                jopt(p.limit_mean),
                p.unanswered,
                jopt(p.process_cpu_share),
                jopt(p.machine_busy_share),
                jopt(p.used_share)
            );
        }
        s.push_str("\n  ],\n  \"controller_speed\": [");
        for (i, st) in self.settles().iter().enumerate() {
            let _ = write!(
                s,
                "{}\n    {{\"phase\": {}, \"profile\": {}, \"kind\": {}, \"start_limit\": {}, \"end_limit\": {}, \"other_side_end_limit\": {}, \
                 \"settle_secs\": [{}], \"step_levels\": [{}], \"fg_p99_5s_after_step_us\": {}, \"tail_peak_to_peak\": {}, \"tail_reversals\": {}}}",
                if i == 0 { "" } else { "," },
                jstr(&st.phase),
                jstr(st.profile()),
                jstr(st.kind.name()),
                jopt(st.start_limit),
                jopt(st.end_limit),
                jopt(st.sibling_end),
                st.settle_s.iter().map(|x| jopt(*x)).collect::<Vec<_>>().join(", "),
                st.step_levels.iter().map(|x| jopt(*x)).collect::<Vec<_>>().join(", "),
                jopt(st.fg_p99_after_step_us),
                jnum(st.tail_p2p),
                st.reversals
            );
        }
        for (key, median) in [("bars", false), ("bars_median_of_rounds", true)] {
            let _ = write!(s, "\n  ],\n  \"{key}\": [");
            for (i, b) in self.bars_on(median).iter().enumerate() {
                let _ = write!(
                    s,
                    "{}\n    {{\"bar\": {}, \"value\": {}, \"pass\": {}}}",
                    if i == 0 { "" } else { "," },
                    jstr(&b.what),
                    jstr(&b.value),
                    b.pass.map(|p| p.to_string()).unwrap_or("null".into())
                );
            }
        }
        let _ = write!(s, "\n  ],\n  \"interrupted\": {}\n}}\n", self.interrupted);
        s
    }
}
