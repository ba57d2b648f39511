//! The canonical CIFAR-10 binary format.
//!
//! A CIFAR-10 directory holds six files: `data_batch_1.bin` … `data_batch_5.bin` (the training
//! split) and `test_batch.bin`. Each file is a sequence of 3073-byte records: one label byte
//! (0–9) followed by 3072 pixel bytes, the 1024 red values, then the 1024 green, then the 1024
//! blue, each plane row-major 32×32.

use std::fs;
use std::io::{self, Write};
use std::path::{Path, PathBuf};

/// Pixel bytes in one image: 3 channels × 32 × 32.
pub const IMAGE_BYTES: usize = 3 * 32 * 32;

/// Bytes in one record: the label byte followed by the image.
pub const RECORD_BYTES: usize = 1 + IMAGE_BYTES;

/// Side of a CIFAR-10 image in pixels.
pub const IMAGE_SIDE_PX: u32 = 32;

/// Pixels in one channel plane (32 × 32).
pub const PLANE_PIXELS: usize = 32 * 32;

/// CIFAR-10's class names, indexed by label.
pub const CLASSES: [&str; 10] =
    ["airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck"];

/// The training split's files, in order.
pub const TRAIN_FILES: [&str; 5] =
    ["data_batch_1.bin", "data_batch_2.bin", "data_batch_3.bin", "data_batch_4.bin", "data_batch_5.bin"];

/// The test split's file.
pub const TEST_FILE: &str = "test_batch.bin";

/// Name of the marker file that flags a directory as holding synthetic data.
pub const SYNTHETIC_MARKER: &str = "SYNTHETIC";

/// Everything that can go wrong reading, importing, synthesising or writing CIFAR-10 data.
///
/// Every variant names the file (or archive entry) it is about.
#[derive(Debug, thiserror::Error)]
pub enum DataError {
    /// An operating-system error on a file or directory.
    #[error("{}: {source}", path.display())]
    Io {
        /// The file or directory the operation was on.
        path: PathBuf,
        /// The underlying error.
        source: io::Error,
    },
    /// A file the dataset needs does not exist.
    #[error(
        "{}: not found (a CIFAR-10 directory needs data_batch_1.bin … data_batch_5.bin and \
         test_batch.bin)",
        path.display()
    )]
    Missing {
        /// The missing file.
        path: PathBuf,
    },
    /// A file's content breaks the CIFAR-10 binary format.
    #[error(
        "{}: {problem} (the file is truncated or is not CIFAR-10 binary data: import or fetch the \
         dataset again with `trickbench data import` or `trickbench data fetch cifar10`)",
        path.display()
    )]
    Format {
        /// The offending file.
        path: PathBuf,
        /// What is wrong, e.g. "record 17 has label 12, expected 0–9".
        problem: String,
    },
    /// The source of an import is not laid out as `train/<class>/<image>`, `test/<class>/<image>`.
    #[error("{}: {problem}", path.display())]
    Layout {
        /// The offending directory, archive or archive entry.
        path: PathBuf,
        /// What is wrong.
        problem: String,
    },
    /// An image file could not be decoded.
    #[error("{}: cannot decode image: {source}", path.display())]
    Decode {
        /// The image file (or `archive:entry`).
        path: PathBuf,
        /// The decoder's error.
        source: image::ImageError,
    },
    /// An image is not 32×32 pixels.
    #[error(
        "{}: image is {width_px}×{height_px} pixels, expected 32×32 (resize the images to 32×32 first)",
        path.display()
    )]
    ImageSize {
        /// The image file (or `archive:entry`).
        path: PathBuf,
        /// The image's width in pixels.
        width_px: u32,
        /// The image's height in pixels.
        height_px: u32,
    },
    /// A tar entry that could escape the output directory or is not a plain file or folder.
    #[error("{}: unsafe archive entry {entry:?}: {reason}", archive.display())]
    UnsafeEntry {
        /// The tar archive.
        archive: PathBuf,
        /// The entry's path as stored in the archive.
        entry: String,
        /// Why it is rejected.
        reason: &'static str,
    },
}

impl From<DataError> for crate::error::Error {
    fn from(error: DataError) -> Self {
        crate::error::Error::Module(Box::new(error))
    }
}

impl DataError {
    /// Wraps an I/O error with the path it happened on.
    pub fn io(path: impl Into<PathBuf>, source: io::Error) -> Self {
        DataError::Io { path: path.into(), source }
    }
}

/// One split of CIFAR-10 in memory: images as contiguous channel-major bytes plus labels.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CifarSplit {
    /// `len() × IMAGE_BYTES` bytes; image `i` is `images[i * IMAGE_BYTES..(i + 1) * IMAGE_BYTES]`,
    /// laid out as the R plane, then G, then B, each row-major 32×32.
    pub images: Vec<u8>,
    /// One label (0–9) per image.
    pub labels: Vec<u8>,
}

impl CifarSplit {
    /// An empty split with room for `capacity` records.
    pub fn with_capacity(capacity: usize) -> Self {
        CifarSplit {
            images: Vec::with_capacity(capacity * IMAGE_BYTES),
            labels: Vec::with_capacity(capacity),
        }
    }

    /// Number of records.
    pub fn len(&self) -> usize {
        self.labels.len()
    }

    /// Whether the split holds no records.
    pub fn is_empty(&self) -> bool {
        self.labels.is_empty()
    }

    /// The 3072 channel-major pixel bytes of record `i`.
    ///
    /// # Panics
    /// If `i >= self.len()`.
    pub fn image(&self, i: usize) -> &[u8] {
        &self.images[i * IMAGE_BYTES..(i + 1) * IMAGE_BYTES]
    }

    /// A copy of the first `n` records (all of them if `n >= self.len()`).
    pub fn subset(&self, n: usize) -> CifarSplit {
        let n = n.min(self.len());
        CifarSplit { images: self.images[..n * IMAGE_BYTES].to_vec(), labels: self.labels[..n].to_vec() }
    }

    /// Appends one record.
    ///
    /// # Panics
    /// If `image` is not exactly `IMAGE_BYTES` long.
    pub fn push(&mut self, label: u8, image: &[u8]) {
        assert_eq!(image.len(), IMAGE_BYTES, "a CIFAR-10 image has {IMAGE_BYTES} bytes");
        self.labels.push(label);
        self.images.extend_from_slice(image);
    }

    /// Appends all records of `other`.
    pub fn extend(&mut self, other: &CifarSplit) {
        self.labels.extend_from_slice(&other.labels);
        self.images.extend_from_slice(&other.images);
    }
}

/// CIFAR-10's training and test splits.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CifarDataset {
    /// The training split (50,000 records for the real dataset).
    pub train: CifarSplit,
    /// The test split (10,000 records for the real dataset).
    pub test: CifarSplit,
}

/// Reads one CIFAR-10 binary file, checking its size and every label.
///
/// An empty file is a valid file of zero records.
pub fn read_file(path: &Path) -> Result<CifarSplit, DataError> {
    let bytes = fs::read(path).map_err(|source| match source.kind() {
        io::ErrorKind::NotFound => DataError::Missing { path: path.to_path_buf() },
        _ => DataError::io(path, source),
    })?;
    parse(&bytes, path)
}

/// Parses the content of a CIFAR-10 binary file, checking its size and every label; `path` is
/// only named in errors.
pub fn parse(bytes: &[u8], path: &Path) -> Result<CifarSplit, DataError> {
    let records = check_size(bytes.len() as u64, path)?;
    check_labels(bytes, 0, path)?;
    let mut split = CifarSplit::with_capacity(records);
    for record in bytes.chunks_exact(RECORD_BYTES) {
        split.labels.push(record[0]);
        split.images.extend_from_slice(&record[1..]);
    }
    Ok(split)
}

/// The number of records in a file of `bytes` bytes, or the error naming `path` when that is not
/// a whole number of records.
fn check_size(bytes: u64, path: &Path) -> Result<usize, DataError> {
    if !bytes.is_multiple_of(RECORD_BYTES as u64) {
        return Err(DataError::Format {
            path: path.to_path_buf(),
            problem: format!("size {bytes} is not a multiple of the {RECORD_BYTES}-byte record"),
        });
    }
    Ok((bytes / RECORD_BYTES as u64) as usize)
}

/// Checks the label byte of every whole record in `records`, the first of which is record
/// `first_index` of `path`.
fn check_labels(records: &[u8], first_index: usize, path: &Path) -> Result<(), DataError> {
    for (offset, record) in records.chunks_exact(RECORD_BYTES).enumerate() {
        let label = record[0];
        if usize::from(label) >= CLASSES.len() {
            return Err(DataError::Format {
                path: path.to_path_buf(),
                problem: format!("record {} has label {label}, expected 0–9", first_index + offset),
            });
        }
    }
    Ok(())
}

/// Records read at a time by [`validate_file`] (about 3 MiB).
const VALIDATE_CHUNK_RECORDS: usize = 1024;

/// Checks one CIFAR-10 binary file as [`read_file`] does (its size and every label) without
/// keeping its pixels, and returns its number of records.
pub fn validate_file(path: &Path) -> Result<usize, DataError> {
    let mut file = fs::File::open(path).map_err(|source| match source.kind() {
        io::ErrorKind::NotFound => DataError::Missing { path: path.to_path_buf() },
        _ => DataError::io(path, source),
    })?;
    let bytes = file.metadata().map_err(|source| DataError::io(path, source))?.len();
    let records = check_size(bytes, path)?;
    let mut chunk = vec![0u8; VALIDATE_CHUNK_RECORDS * RECORD_BYTES];
    let mut done = 0;
    while done < records {
        let n = (records - done).min(VALIDATE_CHUNK_RECORDS);
        io::Read::read_exact(&mut file, &mut chunk[..n * RECORD_BYTES])
            .map_err(|source| DataError::io(path, source))?;
        check_labels(&chunk[..n * RECORD_BYTES], done, path)?;
        done += n;
    }
    Ok(records)
}

/// The number of records of each split of a CIFAR-10 directory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SplitSizes {
    /// Records in the five training files together.
    pub train: usize,
    /// Records in the test file.
    pub test: usize,
}

/// Checks a CIFAR-10 directory as [`load_dir`] would read it (every file present, each a whole
/// number of records with labels 0–9), without building the dataset in memory, and returns the
/// splits' sizes.
pub fn validate_dir(dir: &Path) -> Result<SplitSizes, DataError> {
    let mut train = 0;
    for name in TRAIN_FILES {
        train += validate_file(&dir.join(name))?;
    }
    let test = validate_file(&dir.join(TEST_FILE))?;
    Ok(SplitSizes { train, test })
}

/// Loads a CIFAR-10 directory: the five training files (concatenated in order) and the test file.
///
/// Every file must exist; a missing one is reported by name.
pub fn load_dir(dir: &Path) -> Result<CifarDataset, DataError> {
    let mut train = CifarSplit::default();
    for name in TRAIN_FILES {
        let part = read_file(&dir.join(name))?;
        if train.is_empty() {
            train = part;
        } else {
            train.extend(&part);
        }
    }
    let test = read_file(&dir.join(TEST_FILE))?;
    Ok(CifarDataset { train, test })
}

/// Whether `dir` holds all six CIFAR-10 binary files (their content is not checked).
pub fn is_cifar_dir(dir: &Path) -> bool {
    TRAIN_FILES.iter().chain(std::iter::once(&TEST_FILE)).all(|name| dir.join(name).is_file())
}

/// Whether `dir` holds at least one of the six CIFAR-10 binary files.
pub fn has_cifar_file(dir: &Path) -> bool {
    TRAIN_FILES.iter().chain(std::iter::once(&TEST_FILE)).any(|name| dir.join(name).exists())
}

/// Whether `dir` carries the marker that its data is synthetic (see `synth::write_synthetic`).
pub fn is_synthetic_dir(dir: &Path) -> bool {
    dir.join(SYNTHETIC_MARKER).is_file()
}

/// Removes the synthetic-data marker from `dir`, if there is one.
pub fn remove_synthetic_marker(dir: &Path) -> Result<(), DataError> {
    let path = dir.join(SYNTHETIC_MARKER);
    match fs::remove_file(&path) {
        Err(source) if source.kind() != io::ErrorKind::NotFound => Err(DataError::io(path, source)),
        _ => Ok(()),
    }
}

/// Writes `split` into `dir` as the files `file_names`, in order, `records_per_file` records
/// each, the last file taking all remaining records. Each file is written atomically (a
/// temporary file in `dir`, flushed to disk, then renamed over the target).
///
/// # Panics
/// If `file_names` is empty.
pub fn write_split_files(
    split: &CifarSplit,
    dir: &Path,
    file_names: &[&str],
    records_per_file: usize,
) -> Result<(), DataError> {
    let (last, leading) = file_names.split_last().expect("write_split_files needs at least one file name");
    let mut start = 0;
    for name in leading {
        let end = (start + records_per_file).min(split.len());
        write_records(split, start..end, &dir.join(name))?;
        start = end;
    }
    write_records(split, start..split.len(), &dir.join(last))?;
    sync_dir(dir)
}

/// Writes `dataset` into `dir` (created if needed) as the six CIFAR-10 files: the training split
/// in five files of `train.len() / 5` records (the last one also takes the remainder), the test
/// split in `test_batch.bin`.
pub fn write_dir(dataset: &CifarDataset, dir: &Path) -> Result<(), DataError> {
    fs::create_dir_all(dir).map_err(|source| DataError::io(dir, source))?;
    write_split_files(&dataset.train, dir, &TRAIN_FILES, dataset.train.len() / TRAIN_FILES.len())?;
    write_split_files(&dataset.test, dir, &[TEST_FILE], dataset.test.len())
}

/// Writes records `range` of `split` to `path` atomically.
fn write_records(split: &CifarSplit, range: std::ops::Range<usize>, path: &Path) -> Result<(), DataError> {
    let mut bytes = Vec::with_capacity(range.len() * RECORD_BYTES);
    for i in range {
        bytes.push(split.labels[i]);
        bytes.extend_from_slice(split.image(i));
    }
    write_atomically(path, &bytes)
}

/// Writes `bytes` to `path` through a temporary file in the same directory, flushed to disk
/// before it is renamed over `path`.
pub(crate) fn write_atomically(path: &Path, bytes: &[u8]) -> Result<(), DataError> {
    let dir = match path.parent() {
        Some(parent) if !parent.as_os_str().is_empty() => parent,
        _ => Path::new("."),
    };
    let mut builder = tempfile::Builder::new();
    builder.prefix(".partial-");
    // Same permissions as `fs::write` (0o666 less the umask), not the temporary file's 0o600.
    #[cfg(unix)]
    builder.permissions(<fs::Permissions as std::os::unix::fs::PermissionsExt>::from_mode(0o666));
    let mut temp = builder.tempfile_in(dir).map_err(|source| DataError::io(dir, source))?;
    temp.write_all(bytes)
        .and_then(|()| temp.as_file().sync_all())
        .map_err(|source| DataError::io(temp.path(), source))?;
    temp.persist(path).map_err(|error| DataError::io(path, error.error))?;
    Ok(())
}

/// Flushes a directory's entries (the renames into it) to disk.
fn sync_dir(dir: &Path) -> Result<(), DataError> {
    #[cfg(unix)]
    fs::File::open(dir).and_then(|handle| handle.sync_all()).map_err(|source| DataError::io(dir, source))?;
    #[cfg(not(unix))]
    let _ = dir;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A split of `n` records whose pixels and labels are derived from the index.
    fn sample_split(n: usize, salt: u8) -> CifarSplit {
        let mut split = CifarSplit::default();
        for i in 0..n {
            let image: Vec<u8> =
                (0..IMAGE_BYTES).map(|p| (p as u8).wrapping_mul(7) ^ (i as u8).wrapping_add(salt)).collect();
            split.push((i % 10) as u8, &image);
        }
        split
    }

    #[test]
    fn round_trip_through_a_directory() {
        let dir = tempfile::tempdir().unwrap();
        let dataset = CifarDataset { train: sample_split(23, 1), test: sample_split(6, 2) };
        write_dir(&dataset, dir.path()).unwrap();
        assert!(is_cifar_dir(dir.path()));
        let sizes: Vec<u64> =
            TRAIN_FILES.iter().map(|name| fs::metadata(dir.path().join(name)).unwrap().len()).collect();
        let r = RECORD_BYTES as u64;
        assert_eq!(sizes, vec![4 * r, 4 * r, 4 * r, 4 * r, 7 * r]);
        assert_eq!(load_dir(dir.path()).unwrap(), dataset);
        let leftovers: Vec<_> = fs::read_dir(dir.path()).unwrap().collect();
        assert_eq!(leftovers.len(), 6, "no temporary files are left behind");
    }

    #[test]
    fn split_accessors() {
        let split = sample_split(5, 3);
        assert_eq!(split.len(), 5);
        assert!(!split.is_empty());
        assert_eq!(split.image(2), &split.images[2 * IMAGE_BYTES..3 * IMAGE_BYTES]);
        let head = split.subset(2);
        assert_eq!(head.labels, vec![0, 1]);
        assert_eq!(head.images, split.images[..2 * IMAGE_BYTES]);
        assert_eq!(split.subset(99), split);
        assert!(CifarSplit::default().is_empty());
    }

    #[test]
    fn truncated_file_is_reported_by_name() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("data_batch_3.bin");
        fs::write(&path, vec![0u8; 10 * RECORD_BYTES + 1]).unwrap();
        let message = read_file(&path).unwrap_err().to_string();
        assert!(message.contains("data_batch_3.bin"), "{message}");
        assert!(message.contains("size 30731 is not a multiple of the 3073-byte record"), "{message}");
    }

    #[test]
    fn bad_label_is_reported_with_its_record() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("test_batch.bin");
        let mut bytes = vec![0u8; 20 * RECORD_BYTES];
        bytes[17 * RECORD_BYTES] = 12;
        fs::write(&path, bytes).unwrap();
        let message = read_file(&path).unwrap_err().to_string();
        assert!(message.contains("test_batch.bin"), "{message}");
        assert!(message.contains("record 17 has label 12, expected 0–9"), "{message}");
    }

    #[test]
    fn missing_training_file_is_named() {
        let dir = tempfile::tempdir().unwrap();
        let dataset = CifarDataset { train: sample_split(10, 4), test: sample_split(2, 5) };
        write_dir(&dataset, dir.path()).unwrap();
        fs::remove_file(dir.path().join("data_batch_4.bin")).unwrap();
        assert!(!is_cifar_dir(dir.path()));
        let error = load_dir(dir.path()).unwrap_err();
        assert!(matches!(error, DataError::Missing { .. }));
        assert!(error.to_string().contains("data_batch_4.bin"), "{error}");
    }

    #[test]
    fn validation_checks_what_loading_checks_without_loading() {
        let dir = tempfile::tempdir().unwrap();
        let dataset =
            CifarDataset { train: sample_split(2 * VALIDATE_CHUNK_RECORDS + 7, 6), test: sample_split(3, 7) };
        write_dir(&dataset, dir.path()).unwrap();
        let sizes = validate_dir(dir.path()).unwrap();
        assert_eq!(sizes, SplitSizes { train: dataset.train.len(), test: 3 });
        assert!(has_cifar_file(dir.path()));

        // A bad label past the first chunk of records is found, with its record number.
        let last = dir.path().join("data_batch_5.bin");
        let mut bytes = fs::read(&last).unwrap();
        let records = bytes.len() / RECORD_BYTES;
        bytes[(records - 1) * RECORD_BYTES] = 200;
        fs::write(&last, &bytes).unwrap();
        let message = validate_dir(dir.path()).unwrap_err().to_string();
        let expected = format!("record {} has label 200, expected 0–9", records - 1);
        assert!(message.contains("data_batch_5.bin") && message.contains(&expected), "{message}");
        assert_eq!(load_dir(dir.path()).unwrap_err().to_string(), message, "the loader says the same");

        fs::write(dir.path().join("data_batch_2.bin"), vec![0u8; RECORD_BYTES - 100]).unwrap();
        let message = validate_dir(dir.path()).unwrap_err().to_string();
        assert!(message.contains("data_batch_2.bin") && message.contains("size 2973"), "{message}");

        fs::remove_file(dir.path().join("test_batch.bin")).unwrap();
        fs::write(dir.path().join("data_batch_2.bin"), b"").unwrap();
        fs::write(&last, vec![0u8; RECORD_BYTES]).unwrap();
        let error = validate_dir(dir.path()).unwrap_err();
        assert!(matches!(&error, DataError::Missing { path } if path.ends_with("test_batch.bin")), "{error}");
    }

    #[test]
    fn synthetic_marker_is_detected_and_removed() {
        let dir = tempfile::tempdir().unwrap();
        assert!(!is_synthetic_dir(dir.path()));
        fs::write(dir.path().join(SYNTHETIC_MARKER), "synthetic").unwrap();
        assert!(is_synthetic_dir(dir.path()));
        remove_synthetic_marker(dir.path()).unwrap();
        assert!(!is_synthetic_dir(dir.path()));
        remove_synthetic_marker(dir.path()).unwrap();
    }
}
