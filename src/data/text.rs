//! A text corpus as character tokens (tiny Shakespeare for the character-level GPT) and its
//! batches: endless random training windows, and the validation split's windows in order, with
//! the data-pipeline tricks of [`Pipeline`] switchable (`gpu-augment` does not apply: text is not
//! augmented).
//!
//! Training batch `k` is a pure function of the seed and `k`: its window starts are drawn from
//! ChaCha8 stream `k` of the seed. Worker threads can therefore assemble batches in any order and
//! timing and still yield exactly the batches the training thread would.

use std::collections::BTreeSet;
use std::path::Path;
use std::sync::Arc;

use rand::RngExt;
use tch::{Device, Kind, Tensor};

use crate::data::loader::{stream, Batch, Pipeline};
use crate::data::transfer;
use crate::data::workers::WorkerPool;
use crate::error::Error;
use crate::measure::phases;
use crate::results::phases::StepPhase;

/// Most distinct characters a corpus may have: token ids are `u16`.
pub const MAX_VOCABULARY: usize = 1 << 16;
/// Share of the tokens that train, the first ones; the rest validate.
const TRAIN_FRACTION: f64 = 0.9;

/// A text corpus as character tokens: vocabulary, train and validation splits.
#[derive(Debug, Clone)]
pub struct TextCorpus {
    /// The distinct characters of the text, sorted; token `i` is `vocabulary[i]`.
    pub vocabulary: Vec<char>,
    /// The first 90% of the tokens.
    pub train: Arc<[u16]>,
    /// The last 10% of the tokens.
    pub validation: Arc<[u16]>,
}

impl TextCorpus {
    /// Reads a UTF-8 text file; the vocabulary is its distinct characters, sorted; the first 90%
    /// of the tokens train, the last 10% validate (nanoGPT's shakespeare_char/prepare.py split).
    pub fn from_file(path: &Path) -> Result<Self, Error> {
        let bytes = std::fs::read(path).map_err(|e| Error::io(path, e))?;
        let source = path.display().to_string();
        let text = std::str::from_utf8(&bytes).map_err(|e| {
            Error::Invalid(format!("{source}: not UTF-8 text: invalid byte at offset {}", e.valid_up_to()))
        })?;
        if let Some(offset) = bytes.iter().position(|&b| b == 0) {
            return Err(Error::Invalid(format!(
                "{source}: not text: a NUL byte at offset {offset} (is it a binary file?)"
            )));
        }
        Self::from_text(text, &source)
    }

    /// The same from text in memory (`source` names it in errors).
    pub fn from_text(text: &str, source: &str) -> Result<Self, Error> {
        if text.is_empty() {
            return Err(Error::Invalid(format!("{source}: the text is empty")));
        }
        let vocabulary: Vec<char> = text.chars().collect::<BTreeSet<_>>().into_iter().collect();
        if vocabulary.len() > MAX_VOCABULARY {
            return Err(Error::Invalid(format!(
                "{source}: {} distinct characters; token ids hold at most {MAX_VOCABULARY}",
                vocabulary.len(),
            )));
        }
        let tokens = text.chars().map(|c| token(&vocabulary, c)).collect::<Result<Vec<_>, _>>()?;
        let train = train_tokens(tokens.len());
        Ok(Self { train: tokens[..train].into(), validation: tokens[train..].into(), vocabulary })
    }

    /// Fails unless each split holds at least one window of `context` tokens and its next-token
    /// target, naming `source` and the shortest text that would do.
    pub fn check_context(&self, context: usize, source: &str) -> Result<(), Error> {
        for (split, tokens) in [
            ("training split (the first 90%)", &self.train),
            ("validation split (the last 10%)", &self.validation),
        ] {
            if check_windows(1, context, tokens.len()).is_err() {
                let shortest = (context + 1..)
                    .find(|&n| train_tokens(n) > context && n - train_tokens(n) > context)
                    .unwrap_or(usize::MAX);
                return Err(Error::Invalid(format!(
                    "{source}: too short for a context of {context} characters: its {split} has {} \
                     characters and a window needs {}; give a text of at least {shortest} characters",
                    tokens.len(),
                    context + 1
                )));
            }
        }
        Ok(())
    }

    /// Number of distinct characters.
    pub fn vocab_size(&self) -> usize {
        self.vocabulary.len()
    }

    /// Characters of the whole corpus (train + validation).
    pub fn len_tokens(&self) -> usize {
        self.train.len() + self.validation.len()
    }

    /// The tokens of `text`; fails on the first character not in the vocabulary, naming it.
    pub fn encode(&self, text: &str) -> Result<Vec<u16>, Error> {
        text.chars().map(|c| token(&self.vocabulary, c)).collect()
    }

    /// The text of `tokens`; a token outside the vocabulary becomes U+FFFD (the replacement
    /// character).
    pub fn decode(&self, tokens: &[u16]) -> String {
        tokens
            .iter()
            .map(|&t| self.vocabulary.get(usize::from(t)).copied().unwrap_or(char::REPLACEMENT_CHARACTER))
            .collect()
    }
}

/// The token of `c` in the sorted `vocabulary`.
fn token(vocabulary: &[char], c: char) -> Result<u16, Error> {
    match vocabulary.binary_search(&c) {
        Ok(i) => Ok(i as u16),
        Err(_) => {
            Err(Error::Invalid(format!("character {c:?} (U+{:04X}) is not in the vocabulary", u32::from(c))))
        }
    }
}

/// How a text loader assembles batches.
#[derive(Debug, Clone, Copy)]
pub struct TextLoaderOptions {
    /// Windows per batch.
    pub batch_size: usize,
    /// Tokens per window, `T`: the model's context length.
    pub context: usize,
    /// Device the batches are put on.
    pub device: Device,
    /// Seed of the window starts.
    pub seed: u64,
    /// The data-pipeline tricks; `device_augment` does not apply to text and is ignored.
    pub pipeline: Pipeline,
}

/// Fails unless windows of `context` tokens, `batch_size` per batch, fit in a split of
/// `split_tokens` tokens (a window needs `context + 1`: its inputs and one more target).
fn check_windows(batch_size: usize, context: usize, split_tokens: usize) -> Result<(), Error> {
    if batch_size == 0 {
        return Err(Error::Invalid("batch size 0: a batch needs at least one window".into()));
    }
    if context == 0 {
        return Err(Error::Invalid("context 0: a window needs at least one token".into()));
    }
    if split_tokens < context + 1 {
        return Err(Error::Invalid(format!(
            "context {context} needs a split of at least {} tokens; the split has {split_tokens}",
            context + 1,
        )));
    }
    Ok(())
}

/// How many of a text's `tokens` train: Python's int(n * 0.9), as prepare.py computes it.
fn train_tokens(tokens: usize) -> usize {
    (tokens as f64 * TRAIN_FRACTION) as usize
}

/// Which windows training batch `k` holds: a pure function of the seed and `k`.
#[derive(Debug, Clone)]
struct Sampler {
    tokens: Arc<[u16]>,
    batch_size: usize,
    context: usize,
    seed: u64,
}

impl Sampler {
    /// Fills `host` with batch `k`'s windows of `context + 1` tokens, one after another; their
    /// starts are uniform in `0..=len − context − 1`, drawn from ChaCha8 stream `k`.
    fn fill(&self, k: u64, host: &mut Vec<i64>) {
        host.clear();
        for start in window_starts(self.tokens.len(), self.batch_size, self.context, self.seed, k) {
            host.extend(self.tokens[start..=start + self.context].iter().map(|&t| i64::from(t)));
        }
    }
}

/// Where the `batch_size` windows of training batch `k` start in a split of `split_tokens` tokens:
/// uniform in `0..=split_tokens − context − 1`, drawn from ChaCha8 stream `k` of `seed`. This is
/// what another implementation of the loader needs to assemble the same batches; the split must
/// hold at least `context + 1` tokens.
pub fn window_starts(
    split_tokens: usize,
    batch_size: usize,
    context: usize,
    seed: u64,
    k: u64,
) -> Vec<usize> {
    let mut rng = stream(seed, k);
    let last_start = split_tokens - context - 1;
    (0..batch_size).map(|_| rng.random_range(0..=last_start)).collect()
}

/// Where the training thread's host batches come from.
#[derive(Debug)]
enum Producer {
    /// Assembled on the training thread, into one reused buffer.
    Inline(Vec<i64>),
    /// Assembled by worker threads.
    Workers(WorkerPool<Vec<i64>>),
}

/// Endless training batches of random windows.
#[derive(Debug)]
pub struct TextLoader {
    sampler: Sampler,
    producer: Producer,
    device: Device,
    pipeline: Pipeline,
    batches_done: u64,
}

impl TextLoader {
    /// Fails when the split is shorter than context + 1 tokens, or batch_size/context is 0
    /// (errors name the value).
    pub fn new(tokens: Arc<[u16]>, options: TextLoaderOptions) -> Result<Self, Error> {
        let TextLoaderOptions { batch_size, context, device, seed, pipeline } = options;
        check_windows(batch_size, context, tokens.len())?;
        let sampler = Sampler { tokens, batch_size, context, seed };
        let producer = if pipeline.workers > 0 {
            Producer::Workers(WorkerPool::start(pipeline.workers, |_| {
                let sampler = sampler.clone();
                move |k, host: &mut Vec<i64>| {
                    sampler.fill(k, host);
                    Ok(())
                }
            }))
        } else {
            Producer::Inline(Vec::new())
        };
        Ok(Self { sampler, producer, device, pipeline, batches_done: 0 })
    }

    /// Next batch: inputs [B, T] int64 and targets [B, T] int64 (the inputs shifted by one), on
    /// the device.
    pub fn next_batch(&mut self) -> Result<Batch, Error> {
        let k = self.batches_done;
        self.batches_done += 1;
        let context = self.sampler.context;
        match &mut self.producer {
            Producer::Inline(host) => {
                self.sampler.fill(k, host);
                upload(host, context, self.device, self.pipeline)
            }
            Producer::Workers(pool) => {
                let (host, w) = pool.next()?;
                let batch = upload(&host, context, self.device, self.pipeline);
                pool.recycle(host, w);
                batch
            }
        }
    }

    /// Passes over the split so far: tokens predicted / split tokens (fractional).
    pub fn epochs(&self) -> f64 {
        let predicted = self.batches_done as f64 * (self.sampler.batch_size * self.sampler.context) as f64;
        predicted / self.sampler.tokens.len() as f64
    }
}

/// Every non-overlapping window of `context` (+1 for the targets) tokens of `tokens`, in order,
/// in batches of `batch_size` windows (the last batch may be smaller), at most `max_windows`
/// windows when given: the validation set. Window `i` predicts tokens `i·T + 1 ..= (i + 1)·T`.
/// Batches are assembled on the calling thread (`pipeline.workers` and `device_augment` are
/// ignored). A split shorter than `context + 1` tokens, or a `batch_size` or `context` of 0, yields
/// one error.
pub fn eval_windows(
    tokens: &[u16],
    context: usize,
    batch_size: usize,
    max_windows: Option<usize>,
    device: Device,
    pipeline: Pipeline,
) -> impl Iterator<Item = Result<Batch, Error>> + '_ {
    let checked = check_windows(batch_size, context, tokens.len());
    let windows = match checked {
        Ok(()) => {
            let all = (tokens.len() - 1) / context;
            max_windows.map_or(all, |most| most.min(all))
        }
        Err(_) => 0,
    };
    let mut host = Vec::new();
    let batches = (0..windows.div_ceil(batch_size.max(1))).map(move |i| {
        let first = i * batch_size;
        let end = (first + batch_size).min(windows);
        host.clear();
        for w in first..end {
            host.extend(tokens[w * context..=(w + 1) * context].iter().map(|&t| i64::from(t)));
        }
        upload(&host, context, device, pipeline)
    });
    checked.err().map(Err).into_iter().chain(batches)
}

/// A device batch from `host`, windows of `context + 1` tokens one after another: a window's
/// first `context` tokens are its inputs, its last `context` its targets. With `zero-copy` the
/// windows are a view of `host`; otherwise they are copied into a new tensor first.
fn upload(host: &[i64], context: usize, device: Device, pipeline: Pipeline) -> Result<Batch, Error> {
    phases::enter(StepPhase::HostToDevice);
    let width = context as i64 + 1;
    let shape = [host.len() as i64 / width, width];
    let windows = if pipeline.zero_copy {
        // SAFETY: `host` holds shape[0] × width int64s and outlives `windows`, which is dropped
        // before this function returns; `own` never returns a tensor aliasing its input.
        unsafe { Tensor::f_from_blob(host.as_ptr().cast(), &shape, &[], Kind::Int64, Device::Cpu)? }
    } else {
        Tensor::f_from_slice(host)?.f_view(shape)?
    };
    let t = context as i64;
    Ok(Batch {
        inputs: own(&windows.f_narrow(1, 0, t)?, device, pipeline.pinned)?,
        targets: own(&windows.f_narrow(1, 1, t)?, device, pipeline.pinned)?,
    })
}

/// `view` (a window slice of host tokens) on `device` in contiguous memory of its own. The copy to
/// a device makes it; on the CPU, where the transfer copies nothing, it is copied here, since the
/// host buffer it views is reused for the next batch.
fn own(view: &Tensor, device: Device, pinned: bool) -> Result<Tensor, Error> {
    let moved = transfer::to_device(view, device, pinned)?;
    if device != Device::Cpu {
        return Ok(moved);
    }
    let mut copy = Tensor::f_empty(moved.size(), (moved.kind(), Device::Cpu))?;
    copy.f_copy_(&moved)?;
    Ok(copy)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::assert_same_batches;

    /// Tokens `0, 1, …, n − 1`: a window's first token is its start.
    fn ramp(n: u16) -> Arc<[u16]> {
        (0..n).collect()
    }

    fn options(seed: u64, pipeline: Pipeline) -> TextLoaderOptions {
        TextLoaderOptions { batch_size: 4, context: 8, device: Device::Cpu, seed, pipeline }
    }

    fn batches(tokens: &Arc<[u16]>, options: TextLoaderOptions, count: usize) -> Vec<Batch> {
        let mut loader = TextLoader::new(tokens.clone(), options).unwrap();
        (0..count).map(|_| loader.next_batch().unwrap()).collect()
    }

    fn rows(t: &Tensor) -> Vec<Vec<i64>> {
        Vec::<Vec<i64>>::try_from(t).unwrap()
    }

    #[test]
    fn vocabulary_is_the_sorted_characters_and_the_split_is_ninety_percent() {
        let corpus = TextCorpus::from_text("cabbage, cab!", "test").unwrap();
        assert_eq!(corpus.vocabulary, [' ', '!', ',', 'a', 'b', 'c', 'e', 'g']);
        assert_eq!(corpus.vocab_size(), 8);
        assert_eq!(corpus.len_tokens(), 13);
        // int(13 · 0.9) = 11 tokens train.
        assert_eq!((corpus.train.len(), corpus.validation.len()), (11, 2));
        assert_eq!(corpus.decode(&corpus.train), "cabbage, ca");
        assert_eq!(corpus.decode(&corpus.validation), "b!");
        let empty = TextCorpus::from_text("", "nothing.txt").unwrap_err().to_string();
        assert!(empty.contains("nothing.txt") && empty.contains("empty"), "{empty}");
        let huge: String = (0..=0x10FFFFu32).filter_map(char::from_u32).take(MAX_VOCABULARY + 1).collect();
        let message = TextCorpus::from_text(&huge, "huge.txt").unwrap_err().to_string();
        assert!(message.contains("huge.txt: 65537 distinct characters"), "{message}");
        let fits: String = huge.chars().skip(1).collect();
        assert_eq!(TextCorpus::from_text(&fits, "fits.txt").unwrap().vocab_size(), MAX_VOCABULARY);
    }

    #[test]
    fn encode_and_decode_round_trip() {
        let corpus = TextCorpus::from_text("To be, or not to be: that is the question.\n", "test").unwrap();
        let text = "be not the question: to be\n";
        let tokens = corpus.encode(text).unwrap();
        assert_eq!(tokens.len(), text.chars().count());
        assert_eq!(corpus.decode(&tokens), text);
        // Sorted: '\n', ' ', ',', '.', ':', 'T', 'a', 'b', …
        assert_eq!(corpus.encode("ab").unwrap(), [6, 7]);
        let message = corpus.encode("to be? Z").unwrap_err().to_string();
        assert!(message.contains("'?'") && message.contains("U+003F"), "{message}");
    }

    #[test]
    fn targets_are_the_inputs_shifted_by_one_within_windows_of_the_split() {
        let tokens = ramp(100);
        let mut loader = TextLoader::new(tokens.clone(), options(7, Pipeline::default())).unwrap();
        let mut starts = BTreeSet::new();
        for _ in 0..50 {
            let batch = loader.next_batch().unwrap();
            assert_eq!(batch.inputs.size(), [4, 8]);
            assert_eq!(batch.targets.size(), [4, 8]);
            assert_eq!((batch.inputs.kind(), batch.targets.kind()), (Kind::Int64, Kind::Int64));
            assert_eq!(batch.len(), 32, "predictions: B × T tokens");
            for (inputs, targets) in rows(&batch.inputs).into_iter().zip(rows(&batch.targets)) {
                let start = inputs[0];
                assert!((0..=91).contains(&start), "window start {start} out of 0..=91");
                assert_eq!(inputs, (start..start + 8).collect::<Vec<_>>());
                assert_eq!(targets, (start + 1..start + 9).collect::<Vec<_>>());
                starts.insert(start);
            }
        }
        // 200 draws over 92 starts: both ends and most starts come up.
        assert!(starts.contains(&0) && starts.contains(&91), "{starts:?}");
        assert!(starts.len() > 70, "{} distinct starts", starts.len());
        // 50 batches × 32 predictions over 100 tokens.
        assert!((loader.epochs() - 16.0).abs() < 1e-12, "{}", loader.epochs());
    }

    #[test]
    fn window_starts_are_where_the_loaders_windows_start() {
        // On a ramp each window's first input token is its start.
        let tokens = ramp(500);
        let loaded = batches(&tokens, options(4, Pipeline::default()), 3);
        for (k, batch) in loaded.iter().enumerate() {
            let firsts: Vec<i64> = rows(&batch.inputs).iter().map(|row| row[0]).collect();
            let starts: Vec<i64> =
                window_starts(500, 4, 8, 4, k as u64).into_iter().map(|s| s as i64).collect();
            assert_eq!(firsts, starts, "batch {k}");
        }
    }

    #[test]
    fn batches_depend_only_on_the_seed() {
        let tokens = ramp(1000);
        let first = batches(&tokens, options(1, Pipeline::default()), 5);
        assert_same_batches(&first, &batches(&tokens, options(1, Pipeline::default()), 5));
        let other = batches(&tokens, options(2, Pipeline::default()), 5);
        for (a, b) in first.iter().zip(&other) {
            assert!(!a.inputs.equal(&b.inputs), "another seed, other windows");
        }
        assert!(!first[0].inputs.equal(&first[1].inputs), "each batch draws its own windows");
    }

    #[test]
    fn worker_threads_and_zero_copy_yield_the_baseline_batches() {
        let tokens = ramp(1000);
        let baseline = batches(&tokens, options(3, Pipeline::default()), 9);
        let zero_copy = Pipeline { zero_copy: true, ..Pipeline::default() };
        for pipeline in [
            Pipeline { workers: 2, ..Pipeline::default() },
            Pipeline { workers: 3, ..Pipeline::default() },
            zero_copy,
            Pipeline { workers: 2, ..zero_copy },
            Pipeline { pinned: true, device_augment: true, ..zero_copy },
        ] {
            assert_same_batches(&baseline, &batches(&tokens, options(3, pipeline), 9));
        }
        // Dropping a loader whose workers are blocked on a full queue stops them (no hang).
        let mut loader = TextLoader::new(tokens, options(3, Pipeline { workers: 2, ..Pipeline::default() }));
        loader.as_mut().unwrap().next_batch().unwrap();
        drop(loader);
    }

    #[test]
    fn eval_windows_cover_the_split_in_order_without_overlap() {
        let tokens = ramp(23);
        let run = |max_windows, pipeline| -> Vec<Batch> {
            eval_windows(&tokens, 5, 3, max_windows, Device::Cpu, pipeline).map(Result::unwrap).collect()
        };
        // (23 − 1) / 5 = 4 windows: inputs 0..20, targets 1..21.
        let all = run(None, Pipeline::default());
        assert_eq!(all.iter().map(|b| b.inputs.size()[0]).collect::<Vec<_>>(), [3, 1]);
        let flat = |t: fn(&Batch) -> &Tensor| -> Vec<i64> {
            all.iter().flat_map(|b| Vec::<i64>::try_from(t(b).flatten(0, -1)).unwrap()).collect()
        };
        assert_eq!(flat(|b| &b.inputs), (0..20).collect::<Vec<_>>());
        assert_eq!(flat(|b| &b.targets), (1..21).collect::<Vec<_>>());
        assert_same_batches(&all, &run(None, Pipeline { zero_copy: true, ..Pipeline::default() }));
        let capped = run(Some(2), Pipeline::default());
        assert_eq!(capped.len(), 1);
        assert_eq!(rows(&capped[0].inputs), [[0, 1, 2, 3, 4], [5, 6, 7, 8, 9]]);
        assert_eq!(run(Some(100), Pipeline::default()).len(), 2);
        // Exactly context + 1 tokens: one window.
        let one: Vec<_> = eval_windows(&tokens[..6], 5, 3, None, Device::Cpu, Pipeline::default()).collect();
        assert_eq!(one.len(), 1);
        assert_eq!(one[0].as_ref().unwrap().len(), 5);
        let short: Vec<_> =
            eval_windows(&tokens[..5], 5, 3, None, Device::Cpu, Pipeline::default()).collect();
        assert_eq!(short.len(), 1);
        let message = short[0].as_ref().unwrap_err().to_string();
        assert!(message.contains("context 5") && message.contains("has 5"), "{message}");
    }

    #[test]
    fn unreadable_and_non_utf8_files_are_errors_naming_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let latin1 = dir.path().join("latin1.txt");
        std::fs::write(&latin1, b"abc\ncaf\xe9 au lait").unwrap();
        let message = TextCorpus::from_file(&latin1).unwrap_err().to_string();
        assert!(message.contains("latin1.txt") && message.contains("offset 7"), "{message}");
        let missing = dir.path().join("missing.txt");
        let message = TextCorpus::from_file(&missing).unwrap_err().to_string();
        assert!(message.contains("missing.txt"), "{message}");
        let good = dir.path().join("good.txt");
        std::fs::write(&good, "café au lait\n").unwrap();
        assert_eq!(TextCorpus::from_file(&good).unwrap().len_tokens(), 13);
        // NUL is valid UTF-8, but a file holding one is not text.
        let binary = dir.path().join("weights.bin");
        std::fs::write(&binary, b"ab\0\0cd").unwrap();
        let message = TextCorpus::from_file(&binary).unwrap_err().to_string();
        assert!(message.contains("weights.bin") && message.contains("NUL byte at offset 2"), "{message}");
    }

    #[test]
    fn a_text_too_short_for_the_context_names_the_split_and_the_length_needed() {
        let corpus =
            |n: usize| TextCorpus::from_text(&"ab".repeat(n).chars().take(n).collect::<String>(), "t.txt");
        // 81 characters validate 9 (72 train), and a window of context 8 needs 9.
        assert!(corpus(81).unwrap().check_context(8, "t.txt").is_ok());
        let message = corpus(80).unwrap().check_context(8, "t.txt").unwrap_err().to_string();
        assert!(message.starts_with("t.txt: too short for a context of 8"), "{message}");
        assert!(
            message.contains("validation split (the last 10%) has 8") && message.contains("at least 81"),
            "{message}"
        );
        let message = corpus(5).unwrap().check_context(8, "t.txt").unwrap_err().to_string();
        assert!(message.contains("training split (the first 90%) has 4"), "{message}");
    }

    #[test]
    fn too_short_splits_and_empty_shapes_are_errors() {
        let error = |tokens: u16, batch_size, context| {
            let options = TextLoaderOptions { batch_size, context, ..options(0, Pipeline::default()) };
            TextLoader::new(ramp(tokens), options).unwrap_err().to_string()
        };
        let message = error(8, 4, 8);
        assert!(message.contains("context 8") && message.contains("at least 9") && message.contains("has 8"));
        assert!(TextLoader::new(ramp(9), options(0, Pipeline::default())).is_ok());
        assert!(error(100, 0, 8).contains("batch size 0"));
        assert!(error(100, 4, 0).contains("context 0"));
    }

    #[test]
    fn tiny_shakespeare_has_nanogpts_vocabulary_and_split() {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared/data/tinyshakespeare.txt");
        if !path.exists() {
            eprintln!("skipped: {} not present", path.display());
            return;
        }
        let corpus = TextCorpus::from_file(&path).unwrap();
        assert_eq!(corpus.vocab_size(), 65);
        assert_eq!((corpus.train.len(), corpus.validation.len()), (1_003_854, 111_540));
        assert_eq!(corpus.decode(&corpus.train[..14]), "First Citizen:");
    }
}
