//! GPU energy over a span of work, apart from how the GPU is read: a cumulative energy counter
//! read at the span's two ends, or board power readings integrated over it.
//!
//! NVML's energy counter advances in steps of about 100 ms, and its power reading is a one-second
//! moving average, so neither says anything about a few milliseconds of work: energy is
//! attributed only over a span of at least [`MIN_ENERGY_SPAN_S`], where one step of the counter is
//! at most a tenth of the figure. A counter's figure carries that step
//! ([`Energy::quantisation_j`]), for the report to show beside it. A counter that did not advance over such a span read nothing,
//! and is refused rather than reported as 0 J.

use std::time::Instant;

use crate::results::energy::{Energy, EnergyMethod};

/// The shortest span of GPU work energy is attributed over, seconds.
pub const MIN_ENERGY_SPAN_S: f64 = 1.0;

/// The longest NVML's energy counter is taken to go without advancing, seconds: the step a
/// counter reading can lag the work by, which [`Energy::quantisation_j`] carries.
pub const COUNTER_UPDATE_S: f64 = 0.1;

/// Why a span has no energy figure.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum EnergyError {
    /// The device cannot be measured (no NVIDIA GPU, no NVML, neither counter nor power reading).
    #[error("{0}")]
    Unavailable(String),
    /// A reading of the counter or of board power failed.
    #[error("{0}")]
    Read(String),
    /// The span ended before it reached [`MIN_ENERGY_SPAN_S`].
    #[error(
        "a span of {span_s:.3} s is too short for NVML's readings: energy is attributed over at \
         least {MIN_ENERGY_SPAN_S} s"
    )]
    TooShort {
        /// The span, seconds.
        span_s: f64,
    },
    /// The counter read the same value at both ends of a span of GPU work.
    #[error(
        "NVML's energy counter read {millijoules} mJ at both ends of {span_s:.3} s of GPU work: a \
         failed reading, not 0 J"
    )]
    CounterStuck {
        /// What the counter read, millijoules.
        millijoules: u64,
        /// The span, seconds.
        span_s: f64,
    },
    /// The counter read less at the end of a span than at its start (as after a driver reload).
    #[error("NVML's energy counter went back from {start_mj} mJ to {end_mj} mJ over {span_s:.3} s")]
    CounterWentBack {
        /// The reading at the span's start, millijoules.
        start_mj: u64,
        /// The reading at its end, millijoules.
        end_mj: u64,
        /// The span, seconds.
        span_s: f64,
    },
}

/// A cumulative energy counter of a GPU.
pub trait EnergyCounter {
    /// The energy drawn since the counter's origin, millijoules.
    fn read_mj(&mut self) -> Result<u64, EnergyError>;
}

/// When a span of GPU work began and the samples processed in it so far.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SpanTally {
    began: Instant,
    samples: usize,
}

impl SpanTally {
    /// A span that began at `began`, with no samples yet.
    pub fn new(began: Instant) -> Self {
        Self { began, samples: 0 }
    }

    /// Counts `samples` more processed in the span.
    pub fn count(&mut self, samples: usize) {
        self.samples += samples;
    }

    /// The samples processed in the span.
    pub fn samples(&self) -> usize {
        self.samples
    }

    /// The span's length at `now`, seconds.
    pub fn span_s(&self, now: Instant) -> f64 {
        now.saturating_duration_since(self.began).as_secs_f64()
    }

    /// Whether the span at `now` is still shorter than [`MIN_ENERGY_SPAN_S`].
    pub fn wants_more_time(&self, now: Instant) -> bool {
        self.span_s(now) < MIN_ENERGY_SPAN_S
    }
}

/// A span measured with a cumulative counter: read when it begins and when it ends.
#[derive(Debug)]
pub struct CounterSpan<C> {
    counter: C,
    start_mj: u64,
    tally: SpanTally,
}

impl<C: EnergyCounter> CounterSpan<C> {
    /// Reads `counter` to begin a span at `now`.
    pub fn begin(mut counter: C, now: Instant) -> Result<Self, EnergyError> {
        let start_mj = counter.read_mj()?;
        Ok(Self { counter, start_mj, tally: SpanTally::new(now) })
    }

    /// When the span began and the samples processed in it so far.
    pub fn tally(&self) -> &SpanTally {
        &self.tally
    }

    /// Counts `samples` more processed in the span.
    pub fn count(&mut self, samples: usize) {
        self.tally.count(samples);
    }

    /// Reads the counter again to end the span at `now`: its energy, or why it has none.
    pub fn end(mut self, now: Instant) -> Result<Energy, EnergyError> {
        let end_mj = self.counter.read_mj()?;
        counter_energy(self.start_mj, end_mj, self.tally.span_s(now), self.tally.samples())
    }
}

/// The energy of a span of `span_s` seconds covering `samples`, over which the counter read
/// `start_mj` then `end_mj`; refused when the span is too short or the counter did not advance.
pub fn counter_energy(
    start_mj: u64,
    end_mj: u64,
    span_s: f64,
    samples: usize,
) -> Result<Energy, EnergyError> {
    if span_s < MIN_ENERGY_SPAN_S {
        return Err(EnergyError::TooShort { span_s });
    }
    if end_mj < start_mj {
        return Err(EnergyError::CounterWentBack { start_mj, end_mj, span_s });
    }
    if end_mj == start_mj {
        return Err(EnergyError::CounterStuck { millijoules: end_mj, span_s });
    }
    let joules = (end_mj - start_mj) as f64 / 1000.0;
    let mean_power_w = joules / span_s;
    Ok(Energy {
        joules,
        mean_power_w,
        readings: 2,
        interval_s: span_s,
        method: EnergyMethod::Counter,
        samples: Some(samples),
        quantisation_j: Some(COUNTER_UPDATE_S * mean_power_w),
    })
}

/// The energy of (seconds since the span began, watts) power readings covering `samples`,
/// integrated with the trapezoidal rule; refused when they span less than [`MIN_ENERGY_SPAN_S`].
pub fn sampled_energy(readings: &[(f64, f64)], samples: usize) -> Result<Energy, EnergyError> {
    let joules: f64 = readings.windows(2).map(|w| (w[1].0 - w[0].0) * (w[0].1 + w[1].1) / 2.0).sum();
    let span_s = readings.last().map_or(0.0, |r| r.0) - readings.first().map_or(0.0, |r| r.0);
    if span_s < MIN_ENERGY_SPAN_S {
        return Err(EnergyError::TooShort { span_s });
    }
    Ok(Energy {
        joules,
        mean_power_w: joules / span_s,
        readings: readings.len(),
        interval_s: span_s,
        method: EnergyMethod::SampledPower,
        samples: Some(samples),
        quantisation_j: None,
    })
}

#[cfg(test)]
mod tests {
    use std::cell::Cell;
    use std::rc::Rc;
    use std::time::Duration;

    use super::*;

    /// How often the stand-in counter advances, as NVML's does, milliseconds.
    const QUANTUM_MS: u64 = 100;

    /// A counter that advances in [`QUANTUM_MS`] steps at a constant power, against a clock the
    /// test moves.
    struct QuantisedCounter {
        origin: Instant,
        now: Rc<Cell<Instant>>,
        power_w: u64,
    }

    impl EnergyCounter for QuantisedCounter {
        fn read_mj(&mut self) -> Result<u64, EnergyError> {
            let quanta = self.now.get().duration_since(self.origin).as_millis() as u64 / QUANTUM_MS;
            Ok(quanta * QUANTUM_MS * self.power_w)
        }
    }

    /// A counter at `power_w` and the clock it reads, and the instant `s` seconds after its origin.
    fn counter_at(power_w: u64) -> (QuantisedCounter, Rc<Cell<Instant>>, impl Fn(f64) -> Instant) {
        let origin = Instant::now();
        let now = Rc::new(Cell::new(origin));
        let counter = QuantisedCounter { origin, now: now.clone(), power_w };
        (counter, now, move |s: f64| origin + Duration::from_secs_f64(s))
    }

    #[test]
    fn a_short_span_is_lengthened_by_more_steps_or_refused_never_zero_joules() {
        let (counter, clock, at) = counter_at(250);
        let short = CounterSpan::begin(counter, at(0.02)).unwrap();
        clock.set(at(0.07));
        assert!(short.tally.wants_more_time(at(0.07)));
        let refused = short.end(at(0.07));
        assert!(matches!(refused, Err(EnergyError::TooShort { span_s }) if (span_s - 0.05).abs() < 1e-9));

        let (counter, clock, at) = counter_at(250);
        clock.set(at(0.02));
        let mut span = CounterSpan::begin(counter, at(0.02)).unwrap();
        let mut now_s = 0.02;
        span.count(64);
        while span.tally().wants_more_time(at(now_s)) {
            now_s += 0.05;
            span.count(64);
        }
        clock.set(at(now_s));
        let energy = span.end(at(now_s)).unwrap();
        assert!(energy.interval_s >= MIN_ENERGY_SPAN_S && energy.joules > 0.0, "{energy:?}");
    }

    #[test]
    fn a_span_over_a_second_is_within_one_quantum_and_counts_its_samples() {
        let power_w = 300;
        for start_s in [0.0, 0.03, 0.099, 0.51] {
            let (counter, clock, at) = counter_at(power_w);
            clock.set(at(start_s));
            let mut span = CounterSpan::begin(counter, at(start_s)).unwrap();
            for _ in 0..24 {
                span.count(128);
            }
            clock.set(at(start_s + 1.2));
            let energy = span.end(at(start_s + 1.2)).unwrap();
            let quantum_j = (QUANTUM_MS * power_w) as f64 / 1000.0;
            assert!((energy.joules - 1.2 * power_w as f64).abs() <= quantum_j, "{start_s}: {energy:?}");
            assert_eq!((energy.samples, energy.readings), (Some(24 * 128), 2));
            assert!((energy.mean_power_w - energy.joules / 1.2).abs() < 1e-9);
            assert_eq!(energy.method, EnergyMethod::Counter);
        }
    }

    #[test]
    fn a_counter_stuck_over_a_second_of_work_or_going_back_is_an_error_with_its_reason() {
        let (counter, clock, at) = counter_at(0);
        clock.set(at(0.5));
        let span = CounterSpan::begin(counter, at(0.5)).unwrap();
        clock.set(at(1.75));
        let stuck = span.end(at(1.75)).unwrap_err();
        assert_eq!(stuck, EnergyError::CounterStuck { millijoules: 0, span_s: 1.25 });
        let reason = stuck.to_string();
        assert!(reason.contains("0 mJ at both ends of 1.250 s") && reason.contains("not 0 J"), "{reason}");
        let e = counter_energy(1_000_000, 1_300_000, 1.2, 10).unwrap();
        assert!((e.mean_power_w - 250.0).abs() < 1e-9);
        let step = e.quantisation_j.unwrap();
        assert!(
            (step - COUNTER_UPDATE_S * 250.0).abs() < 1e-9,
            "one update period at the mean power: {step}"
        );
        assert!((step / e.joules - COUNTER_UPDATE_S / 1.2).abs() < 1e-12);
        let back = counter_energy(2_000_000, 1_000, 1.5, 10).unwrap_err();
        assert!(back.to_string().contains("went back from 2000000 mJ to 1000 mJ"), "{back}");
    }

    #[test]
    fn power_readings_are_integrated_over_a_span_of_at_least_a_second() {
        let e = sampled_energy(&[(0.0, 100.0), (1.0, 200.0), (3.0, 200.0)], 512).unwrap();
        assert_eq!(e.joules, 150.0 + 400.0);
        assert_eq!(e.interval_s, 3.0);
        assert!((e.mean_power_w - 550.0 / 3.0).abs() < 1e-9);
        assert_eq!((e.readings, e.samples, e.method), (3, Some(512), EnergyMethod::SampledPower));
        assert_eq!(e.quantisation_j, None);
        let short = sampled_energy(&[(0.0, 100.0), (0.02, 100.0), (0.04, 100.0)], 8).unwrap_err();
        assert!(matches!(short, EnergyError::TooShort { .. }), "{short:?}");
        assert!(matches!(sampled_energy(&[], 0), Err(EnergyError::TooShort { .. })));
    }

    #[test]
    fn energy_methods_are_recorded_by_their_kebab_case_names_and_old_figures_lack_samples() {
        let json = r#"{"joules": 5.0, "mean_power_w": 250.0, "readings": 10, "interval_s": 0.02, "method": "sampled-power"}"#;
        let e: Energy = serde_json::from_str(json).unwrap();
        assert_eq!((e.method, e.samples), (EnergyMethod::SampledPower, None));
        assert_eq!(serde_json::to_string(&EnergyMethod::Counter).unwrap(), "\"counter\"");
        let with_samples = Energy { samples: Some(64), ..e };
        let written = serde_json::to_value(with_samples).unwrap();
        assert_eq!(written["samples"], 64);
        assert!(serde_json::to_value(e).unwrap().get("samples").is_none());
    }
}
