//! Two-level designs for up to [`MAX_FACTORS`] factors: the full factorial for up to four, and
//! for five to seven the half fraction of highest resolution, which is the minimum-aberration
//! design of the standard tables (Box, Hunter & Hunter, *Statistics for Experimenters*, 2nd ed.,
//! table 6.22; Wu & Hamada, *Experiments*, appendix 5A): 2^(5−1) of resolution V (E = ABCD),
//! 2^(6−1) of resolution VI (F = ABCDE), 2^(7−1) of resolution VII (G = ABCDEF). Of each
//! fraction's two halves, the one holding the baseline (every factor off) is used, so its
//! generator carries the sign that puts the all-off configuration in.
//!
//! Factors are numbered from 0 (the letter A); a configuration or an effect is a bit mask over
//! them. A factor's level is +1 (on) or −1 (off).

use std::fmt;

/// The most factors a design varies.
pub const MAX_FACTORS: usize = 7;
/// The fewest: one factor has no interaction to estimate.
pub const MIN_FACTORS: usize = 2;
/// Up to this many factors the full factorial is run.
const FULL_UP_TO: usize = 4;

/// A generated factor: its level is `sign` times the product of the levels of the factors in
/// `word`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Generator {
    factor: usize,
    word: u32,
    sign: i8,
}

/// A two-level design: which configurations it runs and what is aliased with what.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fraction {
    factors: usize,
    generators: Vec<Generator>,
}

/// A word of the defining relation, or an alias: the factors of `mask`, with a sign.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Word {
    /// The factors in the word.
    pub mask: u32,
    /// +1 or −1.
    pub sign: i8,
}

impl fmt::Display for Word {
    /// The word's letters, a minus before a negative one: "−ABCDE".
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.sign < 0 {
            f.write_str("−")?;
        }
        f.write_str(&letters(self.mask))
    }
}

/// The letters of the factors in `mask`: "ABD".
pub fn letters(mask: u32) -> String {
    (0..32).filter(|i| mask & (1 << i) != 0).map(letter).collect()
}

/// The letter of factor `factor` (0: A), as the generators name it.
pub fn letter(factor: usize) -> char {
    char::from(b'A' + u8::try_from(factor).unwrap_or(25).min(25))
}

/// A resolution in the Roman numerals the tables write it in: "V".
pub fn roman(resolution: u32) -> &'static str {
    const NUMERALS: [&str; 9] = ["I", "II", "III", "IV", "V", "VI", "VII", "VIII", "IX"];
    NUMERALS.get(resolution.saturating_sub(1) as usize).copied().unwrap_or("X+")
}

/// The level (+1 or −1) of the effect `mask` in configuration `run`: the product of the levels
/// of its factors.
pub fn level(run: u32, mask: u32) -> f64 {
    let off = (mask & !run).count_ones();
    if off.is_multiple_of(2) {
        1.0
    } else {
        -1.0
    }
}

impl Fraction {
    /// The design for `factors` factors; `None` outside [`MIN_FACTORS`]..=[`MAX_FACTORS`].
    pub fn for_factors(factors: usize) -> Option<Fraction> {
        if !(MIN_FACTORS..=MAX_FACTORS).contains(&factors) {
            return None;
        }
        let generators = if factors <= FULL_UP_TO {
            Vec::new()
        } else {
            // The last factor is the product of all the others, with the sign that puts the
            // all-off configuration in the fraction: off (−1) = sign × (−1)^(k−1).
            let word = (1u32 << (factors - 1)) - 1;
            let sign = if (factors - 1).is_multiple_of(2) { -1 } else { 1 };
            vec![Generator { factor: factors - 1, word, sign }]
        };
        Some(Fraction { factors, generators })
    }

    /// The number of factors.
    pub fn factors(&self) -> usize {
        self.factors
    }

    /// The configurations it runs, each a mask of the factors on: the basic factors' every
    /// combination, each generated factor set by its generator. The all-off configuration is
    /// first.
    pub fn runs(&self) -> Vec<u32> {
        let basic = self.factors - self.generators.len();
        (0..1u32 << basic)
            .map(|run| {
                self.generators.iter().fold(run, |run, g| {
                    let on = f64::from(g.sign) * level(run, g.word) > 0.0;
                    if on {
                        run | (1 << g.factor)
                    } else {
                        run
                    }
                })
            })
            .collect()
    }

    /// The generators in words: "E = −ABCD".
    pub fn generator_texts(&self) -> Vec<String> {
        self.generators
            .iter()
            .map(|g| format!("{} = {}", letters(1 << g.factor), Word { mask: g.word, sign: g.sign }))
            .collect()
    }

    /// The defining relation's words (every product of the generators' defining words), shortest
    /// first; empty for a full factorial.
    pub fn defining_relation(&self) -> Vec<Word> {
        let defining: Vec<Word> =
            self.generators.iter().map(|g| Word { mask: g.word | (1 << g.factor), sign: g.sign }).collect();
        let mut words: Vec<Word> = (1..1u32 << defining.len())
            .map(|subset| {
                (0..defining.len()).filter(|i| subset & (1 << i) != 0).fold(
                    Word { mask: 0, sign: 1 },
                    |w, i| Word { mask: w.mask ^ defining[i].mask, sign: w.sign * defining[i].sign },
                )
            })
            .collect();
        words.sort_by_key(|w| (w.mask.count_ones(), w.mask));
        words
    }

    /// The resolution: the length of the shortest defining word; `None` for a full factorial.
    pub fn resolution(&self) -> Option<u32> {
        self.defining_relation().first().map(|w| w.mask.count_ones())
    }

    /// The effects aliased with the effect `mask`: its product with each defining word.
    pub fn aliases(&self, mask: u32) -> Vec<Word> {
        self.defining_relation().into_iter().map(|w| Word { mask: w.mask ^ mask, sign: w.sign }).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn up_to_four_factors_every_configuration_runs() {
        for k in 2..=4 {
            let fraction = Fraction::for_factors(k).unwrap();
            let mut runs = fraction.runs();
            runs.sort_unstable();
            assert_eq!(runs, (0..1u32 << k).collect::<Vec<_>>());
            assert_eq!(fraction.resolution(), None);
            assert!(fraction.aliases(0b11).is_empty());
        }
        assert_eq!(Fraction::for_factors(1), None);
        assert_eq!(Fraction::for_factors(8), None);
    }

    #[test]
    fn the_half_fractions_hold_the_baseline_and_have_the_tables_resolutions() {
        for (k, resolution, relation) in [(5, 5, "−ABCDE"), (6, 6, "ABCDEF"), (7, 7, "−ABCDEFG")] {
            let fraction = Fraction::for_factors(k).unwrap();
            let runs = fraction.runs();
            assert_eq!(runs.len(), 1 << (k - 1));
            assert_eq!(runs[0], 0, "the baseline, every factor off, is the first configuration");
            assert_eq!(fraction.resolution(), Some(resolution));
            assert_eq!(fraction.defining_relation()[0].to_string(), relation);
            // Every configuration satisfies the defining relation.
            for &run in &runs {
                let word = fraction.defining_relation()[0];
                assert_eq!(f64::from(word.sign) * level(run, word.mask), 1.0, "{run:b}");
            }
        }
        assert_eq!(Fraction::for_factors(5).unwrap().generator_texts(), ["E = −ABCD"]);
    }

    #[test]
    fn main_effects_and_two_trick_interactions_are_orthogonal_in_every_design() {
        for k in 2..=MAX_FACTORS {
            let fraction = Fraction::for_factors(k).unwrap();
            let runs = fraction.runs();
            let singles = (0..k).map(|i| 1u32 << i);
            let pairs = (0..k).flat_map(|i| (i + 1..k).map(move |j| (1u32 << i) | (1 << j)));
            let effects: Vec<u32> = singles.chain(pairs).collect();
            for (n, &a) in effects.iter().enumerate() {
                for &b in &effects[n + 1..] {
                    let dot: f64 = runs.iter().map(|&r| level(r, a) * level(r, b)).sum();
                    assert_eq!(
                        dot,
                        0.0,
                        "{} and {} are aliased in the {k}-factor design",
                        letters(a),
                        letters(b)
                    );
                }
                let balanced: f64 = runs.iter().map(|&r| level(r, a)).sum();
                assert_eq!(balanced, 0.0, "{} is balanced", letters(a));
            }
        }
    }

    #[test]
    fn aliases_are_the_products_with_the_defining_words() {
        let fraction = Fraction::for_factors(5).unwrap();
        let texts: Vec<String> = fraction.aliases(0b00011).iter().map(Word::to_string).collect();
        assert_eq!(texts, ["−CDE"], "AB = −CDE");
        let texts: Vec<String> = fraction.aliases(0b00001).iter().map(Word::to_string).collect();
        assert_eq!(texts, ["−BCDE"]);
    }
}
