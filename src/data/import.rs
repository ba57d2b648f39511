//! Import of an ImageFolder tree (a directory, or a `.tar` / `.tar.gz` / `.tgz` archive of one)
//! into the CIFAR-10 binary format.
//!
//! The source holds `train/<class>/<image>` and `test/<class>/<image>` (optionally inside one
//! wrapping folder), images being 32×32 JPEG or PNG files. Class names sorted alphabetically give
//! the labels. Within a split, images are sorted by class then file name and then interleaved
//! round-robin across classes, so the order is deterministic and every prefix of a split (see
//! `CifarSplit::subset`) is class-balanced. Archives are read as a stream and never extracted:
//! the only files written are the six CIFAR-10 files in the output directory.

use std::collections::BTreeSet;
use std::fs;
use std::io::{BufRead, BufReader, Read};
use std::path::{Component, Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;

use image::ImageFormat;

use super::cifar::{self, CifarDataset, CifarSplit, DataError, IMAGE_BYTES, IMAGE_SIDE_PX, PLANE_PIXELS};

/// The most classes an imported dataset may have (CIFAR-10 labels are 0–9).
pub const MAX_CLASSES: usize = cifar::CLASSES.len();

/// How many decoded images a worker reports at a time.
const PROGRESS_BATCH_IMAGES: usize = 256;

/// The phase an import is in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ImportStage {
    /// Listing the directory or streaming the archive; the total is not known yet.
    Reading,
    /// Decoding the images; the total is known.
    Decoding,
}

/// A progress report, sent repeatedly while an import runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ImportProgress {
    /// The phase the counts refer to.
    pub stage: ImportStage,
    /// Images found (while reading) or decoded (while decoding) so far.
    pub images_done: usize,
    /// Images in all, once known (always `Some` while decoding).
    pub images_total: Option<usize>,
}

/// What an import wrote.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ImportSummary {
    /// Records written to the training files.
    pub train_records: usize,
    /// Records written to the test file.
    pub test_records: usize,
    /// Class names, indexed by label.
    pub classes: Vec<String>,
    /// The directory holding the written CIFAR-10 files.
    pub out_dir: PathBuf,
}

/// Converts the ImageFolder directory or tar archive `src` into CIFAR-10 binary files in
/// `out_dir` (created if needed; a stale synthetic-data marker there is removed).
///
/// `progress` is called from the calling thread as images are found and decoded.
pub fn import(
    src: &Path,
    out_dir: &Path,
    progress: &mut dyn FnMut(ImportProgress),
) -> Result<ImportSummary, DataError> {
    let metadata = fs::metadata(src).map_err(|source| DataError::io(src, source))?;
    let listed =
        if metadata.is_dir() { list_directory(src, progress)? } else { read_archive(src, progress)? };
    let Arranged { train, test, classes } = arrange(src, listed)?;
    let train_records = train.len();
    let test_records = test.len();
    let mut all = train;
    all.extend(test);
    let mut images = decode_all(&all, progress)?;
    let labels: Vec<u8> = all.iter().map(|item| item.label).collect();
    let test_images = images.split_off(train_records * IMAGE_BYTES);
    let dataset = CifarDataset {
        train: CifarSplit { images, labels: labels[..train_records].to_vec() },
        test: CifarSplit { images: test_images, labels: labels[train_records..].to_vec() },
    };
    cifar::write_dir(&dataset, out_dir)?;
    cifar::remove_synthetic_marker(out_dir)?;
    Ok(ImportSummary { train_records, test_records, classes, out_dir: out_dir.to_path_buf() })
}

/// The train and test splits of the ImageFolder directory or tar archive `src`, listed, labelled
/// and ordered exactly as [`import`] orders them, but left encoded.
pub fn read_encoded(src: &Path) -> Result<(EncodedSplit, EncodedSplit), DataError> {
    let metadata = fs::metadata(src).map_err(|source| DataError::io(src, source))?;
    let mut silent = |_: ImportProgress| {};
    let listed =
        if metadata.is_dir() { list_directory(src, &mut silent)? } else { read_archive(src, &mut silent)? };
    let Arranged { train, test, .. } = arrange(src, listed)?;
    Ok((EncodedSplit { items: train }, EncodedSplit { items: test }))
}

/// Images decoded at a time by [`validate`] (12 MiB of pixels).
const VALIDATE_CHUNK_IMAGES: usize = 4096;

/// Checks an ImageFolder directory or tar as a run reads it with [`read_encoded`]: laid out and
/// labelled as [`import`] expects, with images in both splits, and the first `train_samples`
/// training and `test_samples` test images (all where `None`: what a run's profile reads) each a
/// 32×32 JPEG or PNG that decodes. Returns the splits' sizes; the pixels are not kept.
pub fn validate(
    src: &Path,
    train_samples: Option<usize>,
    test_samples: Option<usize>,
) -> Result<cifar::SplitSizes, DataError> {
    let (train, test) = read_encoded(src)?;
    let sizes = cifar::SplitSizes { train: train.len(), test: test.len() };
    for (split, limit) in [(train, train_samples), (test, test_samples)] {
        let split = match limit {
            Some(n) => split.subset(n),
            None => split,
        };
        for chunk in split.items.chunks(VALIDATE_CHUNK_IMAGES) {
            decode_all(chunk, &mut |_| {})?;
        }
    }
    Ok(sizes)
}

/// One split of an ImageFolder source as its JPEG/PNG files (held in memory when they came from
/// an archive, read from disk otherwise): every read of an image decodes it again.
#[derive(Debug)]
pub struct EncodedSplit {
    items: Vec<Item>,
}

impl EncodedSplit {
    /// Number of images.
    pub fn len(&self) -> usize {
        self.items.len()
    }

    /// Whether the split has no images.
    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }

    /// The label of image `i`.
    ///
    /// # Panics
    /// If `i >= self.len()`.
    pub fn label(&self, i: usize) -> u8 {
        self.items[i].label
    }

    /// Reads and decodes image `i` into `out` (3072 CHW bytes).
    ///
    /// # Panics
    /// If `i >= self.len()` or `out` is not 3072 bytes long.
    pub fn decode_into(&self, i: usize, out: &mut [u8]) -> Result<(), DataError> {
        decode_into(&self.items[i], out)
    }

    /// Image `i`'s file as stored (its JPEG or PNG bytes), read from disk where it did not come
    /// from an archive.
    ///
    /// # Panics
    /// If `i >= self.len()`.
    pub fn encoded(&self, i: usize) -> Result<std::borrow::Cow<'_, [u8]>, DataError> {
        let item = &self.items[i];
        match &item.payload {
            Payload::Memory(bytes) => Ok(std::borrow::Cow::Borrowed(bytes)),
            Payload::Disk(path) => {
                fs::read(path).map(std::borrow::Cow::Owned).map_err(|e| DataError::io(path, e))
            }
        }
    }

    /// The first `n` images (every prefix is class-balanced, as with `CifarSplit::subset`).
    pub fn subset(mut self, n: usize) -> Self {
        self.items.truncate(n);
        self
    }

    /// Decodes every image once into a packed split: the records `import` writes.
    pub fn pack(&self) -> Result<CifarSplit, DataError> {
        let images = decode_all(&self.items, &mut |_| {})?;
        Ok(CifarSplit { images, labels: self.items.iter().map(|item| item.label).collect() })
    }
}

/// Where an image's encoded bytes are.
#[derive(Debug)]
enum Payload {
    /// Already read (from an archive).
    Memory(Vec<u8>),
    /// In a file, read when it is decoded.
    Disk(PathBuf),
}

/// A file found in the source, before the layout is checked.
#[derive(Debug)]
struct Listed {
    /// Path components relative to the source root (archive entries may still carry a wrapping
    /// folder).
    components: Vec<String>,
    /// How the file is named in messages (`dir/file` or `archive:entry`).
    shown: PathBuf,
    /// The file's bytes; `None` for files whose extension is not an image type.
    payload: Option<Payload>,
}

/// The split an image belongs to; `Train` sorts first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Split {
    Train,
    Test,
}

/// An image placed in the layout.
#[derive(Debug)]
struct Item {
    split: Split,
    class: String,
    file_name: String,
    label: u8,
    format: ImageFormat,
    shown: PathBuf,
    payload: Payload,
}

/// The image format for a file name's extension, if it is a supported one.
fn image_format(file_name: &str) -> Option<ImageFormat> {
    let (_, extension) = file_name.rsplit_once('.')?;
    match extension.to_ascii_lowercase().as_str() {
        "jpg" | "jpeg" => Some(ImageFormat::Jpeg),
        "png" => Some(ImageFormat::Png),
        _ => None,
    }
}

/// Whether a path component is hidden (`.DS_Store`, `._image.jpg`, …); such files are skipped.
fn is_hidden(component: &str) -> bool {
    component.starts_with('.')
}

/// A file or directory name as UTF-8, or a layout error naming it.
fn utf8_name(name: &std::ffi::OsStr, shown: &Path) -> Result<String, DataError> {
    name.to_str().map(str::to_owned).ok_or_else(|| DataError::Layout {
        path: shown.to_path_buf(),
        problem: "name is not valid UTF-8".to_owned(),
    })
}

/// The entries of a directory as (name, path, is-directory), hidden ones left out.
fn read_dir_entries(dir: &Path) -> Result<Vec<(String, PathBuf, bool)>, DataError> {
    let mut entries = Vec::new();
    for entry in fs::read_dir(dir).map_err(|source| DataError::io(dir, source))? {
        let entry = entry.map_err(|source| DataError::io(dir, source))?;
        let path = entry.path();
        let name = utf8_name(&entry.file_name(), &path)?;
        if is_hidden(&name) {
            continue;
        }
        let is_dir = fs::metadata(&path).map_err(|source| DataError::io(&path, source))?.is_dir();
        entries.push((name, path, is_dir));
    }
    Ok(entries)
}

/// Lists the image files of an ImageFolder directory (with or without one wrapping folder).
fn list_directory(src: &Path, progress: &mut dyn FnMut(ImportProgress)) -> Result<Vec<Listed>, DataError> {
    let has_splits = |dir: &Path| dir.join("train").is_dir() || dir.join("test").is_dir();
    let root = if has_splits(src) {
        src.to_path_buf()
    } else {
        let folders: Vec<PathBuf> = read_dir_entries(src)?
            .into_iter()
            .filter(|(_, _, is_dir)| *is_dir)
            .map(|(_, path, _)| path)
            .collect();
        match folders.as_slice() {
            [only] if has_splits(only) => only.clone(),
            _ => {
                return Err(DataError::Layout {
                    path: src.to_path_buf(),
                    problem: "no train/ and test/ folders found".to_owned(),
                });
            }
        }
    };
    let mut listed = Vec::new();
    for split in ["train", "test"] {
        let split_dir = root.join(split);
        if !split_dir.is_dir() {
            continue;
        }
        for (class, class_path, class_is_dir) in read_dir_entries(&split_dir)? {
            if !class_is_dir {
                listed.push(Listed {
                    components: vec![split.to_owned(), class],
                    shown: class_path,
                    payload: None,
                });
                continue;
            }
            for (file_name, path, is_dir) in read_dir_entries(&class_path)? {
                if is_dir {
                    return Err(DataError::Layout {
                        path,
                        problem: "unexpected folder inside a class folder".to_owned(),
                    });
                }
                listed.push(Listed {
                    payload: image_format(&file_name).map(|_| Payload::Disk(path.clone())),
                    components: vec![split.to_owned(), class.clone(), file_name],
                    shown: path,
                });
                progress(ImportProgress {
                    stage: ImportStage::Reading,
                    images_done: listed.len(),
                    images_total: None,
                });
            }
        }
    }
    Ok(listed)
}

/// The most bytes reserved up front for one archived image (a 32×32 image is a few KiB).
const MAX_PREALLOCATED_BYTES: usize = 1 << 20;

/// Streams a tar (optionally gzip-compressed) archive, keeping the image files in memory and
/// rejecting entries that are links, special files, absolute or contain `..`.
fn read_archive(src: &Path, progress: &mut dyn FnMut(ImportProgress)) -> Result<Vec<Listed>, DataError> {
    let io_error = |source| DataError::io(src, source);
    let file = fs::File::open(src).map_err(io_error)?;
    let mut reader = BufReader::new(file);
    let gzip = reader.fill_buf().map_err(io_error)?.starts_with(&[0x1f, 0x8b]);
    let input: Box<dyn Read> =
        if gzip { Box::new(flate2::bufread::GzDecoder::new(reader)) } else { Box::new(reader) };
    let mut archive = tar::Archive::new(input);
    let mut listed = Vec::new();
    // The tar reader's own errors (no operating-system error code) mean the bytes are not a tar
    // archive, or a truncated one.
    let archive_error = |source: std::io::Error| match source.raw_os_error() {
        Some(_) => DataError::io(src, source),
        None => DataError::Layout {
            path: src.to_path_buf(),
            problem: format!(
                "not a readable tar archive ({source}): expected an ImageFolder directory or a .tar, .tar.gz \
                 or .tgz of one"
            ),
        },
    };
    for entry in archive.entries().map_err(archive_error)? {
        let mut entry = entry.map_err(archive_error)?;
        let name = String::from_utf8_lossy(&entry.path_bytes()).into_owned();
        let unsafe_entry =
            |reason| DataError::UnsafeEntry { archive: src.to_path_buf(), entry: name.clone(), reason };
        let path = entry.path().map_err(|_| unsafe_entry("path is not valid UTF-8"))?.into_owned();
        let mut components = Vec::new();
        for component in path.components() {
            match component {
                Component::Normal(part) => components
                    .push(part.to_str().ok_or_else(|| unsafe_entry("path is not valid UTF-8"))?.to_owned()),
                Component::CurDir => {}
                Component::ParentDir => return Err(unsafe_entry("path contains `..`")),
                Component::RootDir | Component::Prefix(_) => {
                    return Err(unsafe_entry("path is absolute"));
                }
            }
        }
        match entry.header().entry_type() {
            tar::EntryType::Regular | tar::EntryType::Continuous => {}
            tar::EntryType::Directory | tar::EntryType::XGlobalHeader | tar::EntryType::XHeader => {
                continue;
            }
            tar::EntryType::Symlink | tar::EntryType::Link => {
                return Err(unsafe_entry("links are not allowed"));
            }
            _ => return Err(unsafe_entry("not a regular file or folder")),
        }
        if components.is_empty() || components.iter().any(|part| is_hidden(part)) {
            continue;
        }
        let shown = PathBuf::from(format!("{}:{name}", src.display()));
        let file_name = &components[components.len() - 1];
        let payload = match image_format(file_name) {
            Some(_) => {
                // The header's size is not trusted for the allocation: a corrupt or hostile one
                // can claim terabytes; reading stops at the archive's real end.
                let declared = usize::try_from(entry.size()).unwrap_or(usize::MAX);
                let mut bytes = Vec::with_capacity(declared.min(MAX_PREALLOCATED_BYTES));
                entry.read_to_end(&mut bytes).map_err(|source| DataError::io(&shown, source))?;
                Some(Payload::Memory(bytes))
            }
            None => None,
        };
        listed.push(Listed { components, shown, payload });
        progress(ImportProgress {
            stage: ImportStage::Reading,
            images_done: listed.len(),
            images_total: None,
        });
    }
    Ok(listed)
}

/// The images of both splits, labelled and in output order.
#[derive(Debug)]
struct Arranged {
    train: Vec<Item>,
    test: Vec<Item>,
    /// Class names, indexed by label.
    classes: Vec<String>,
}

/// Checks the layout and class lists, assigns labels and orders each split.
fn arrange(src: &Path, listed: Vec<Listed>) -> Result<Arranged, DataError> {
    let tops: BTreeSet<&str> = listed.iter().map(|file| file.components[0].as_str()).collect();
    let wrapped = tops.len() == 1 && !tops.contains("train") && !tops.contains("test");
    let wrapper_len = usize::from(wrapped);
    let mut placed = Vec::new();
    for file in listed {
        let parts = &file.components[wrapper_len.min(file.components.len())..];
        let split = match parts.first().map(String::as_str) {
            Some("train") => Split::Train,
            Some("test") => Split::Test,
            _ => continue,
        };
        let [_, class, file_name] = parts else {
            return Err(DataError::Layout {
                path: file.shown,
                problem: "expected train/<class>/<image> or test/<class>/<image>".to_owned(),
            });
        };
        let (Some(format), Some(payload)) = (image_format(file_name), file.payload) else {
            return Err(DataError::Layout {
                path: file.shown,
                problem: "unsupported file type (expected .jpg, .jpeg or .png)".to_owned(),
            });
        };
        placed.push(Item {
            split,
            class: class.clone(),
            file_name: file_name.clone(),
            label: 0,
            format,
            shown: file.shown,
            payload,
        });
    }
    let classes_of = |split: Split| -> BTreeSet<String> {
        placed.iter().filter(|item| item.split == split).map(|item| item.class.clone()).collect()
    };
    let train_classes = classes_of(Split::Train);
    let test_classes = classes_of(Split::Test);
    if train_classes.is_empty() && test_classes.is_empty() {
        return Err(DataError::Layout {
            path: src.to_path_buf(),
            problem: "no images found under train/<class>/ or test/<class>/".to_owned(),
        });
    }
    for (classes, folder) in [(&train_classes, "train/"), (&test_classes, "test/")] {
        if classes.is_empty() {
            return Err(DataError::Layout {
                path: src.to_path_buf(),
                problem: format!("no images under {folder}"),
            });
        }
    }
    if train_classes != test_classes {
        return Err(DataError::Layout {
            path: src.to_path_buf(),
            problem: format!(
                "train/ has classes {train_classes:?} but test/ has {test_classes:?}; both must \
                 have the same classes"
            ),
        });
    }
    if train_classes.len() > MAX_CLASSES {
        return Err(DataError::Layout {
            path: src.to_path_buf(),
            problem: format!("{} classes found, at most {MAX_CLASSES} are supported", train_classes.len()),
        });
    }
    let classes: Vec<String> = train_classes.into_iter().collect();
    for item in &mut placed {
        let index = classes.binary_search(&item.class).expect("every item's class is in the class list");
        item.label = u8::try_from(index).expect("at most MAX_CLASSES classes");
    }
    placed.sort_by(|a, b| (a.split, a.label, &a.file_name).cmp(&(b.split, b.label, &b.file_name)));
    let test = placed.split_off(placed.partition_point(|item| item.split == Split::Train));
    Ok(Arranged { train: interleave(placed, classes.len()), test: interleave(test, classes.len()), classes })
}

/// Reorders items sorted by label into round-robin order across labels: the first item of each
/// class, then the second of each, and so on.
fn interleave(sorted: Vec<Item>, class_count: usize) -> Vec<Item> {
    let total = sorted.len();
    let mut per_class: Vec<Vec<Item>> = (0..class_count).map(|_| Vec::new()).collect();
    for item in sorted {
        per_class[usize::from(item.label)].push(item);
    }
    let mut queues: Vec<_> = per_class.into_iter().map(Vec::into_iter).collect();
    let mut ordered = Vec::with_capacity(total);
    while ordered.len() < total {
        ordered.extend(queues.iter_mut().filter_map(Iterator::next));
    }
    ordered
}

/// Decodes every item in parallel into one buffer of `items.len() × IMAGE_BYTES` CHW bytes.
fn decode_all(items: &[Item], progress: &mut dyn FnMut(ImportProgress)) -> Result<Vec<u8>, DataError> {
    let total = items.len();
    let mut images = vec![0u8; total * IMAGE_BYTES];
    progress(ImportProgress { stage: ImportStage::Decoding, images_done: 0, images_total: Some(total) });
    let threads = std::thread::available_parallelism().map_or(1, usize::from);
    let chunk_items = total.div_ceil(threads).max(1);
    let cancelled = AtomicBool::new(false);
    let (sender, receiver) = mpsc::channel::<usize>();
    let results: Vec<Result<(), DataError>> = std::thread::scope(|scope| {
        let workers: Vec<_> = items
            .chunks(chunk_items)
            .zip(images.chunks_mut(chunk_items * IMAGE_BYTES))
            .map(|(chunk, out)| {
                let sender = sender.clone();
                let cancelled = &cancelled;
                scope.spawn(move || decode_chunk(chunk, out, &sender, cancelled))
            })
            .collect();
        drop(sender);
        let mut done = 0;
        for count in receiver {
            done += count;
            progress(ImportProgress {
                stage: ImportStage::Decoding,
                images_done: done,
                images_total: Some(total),
            });
        }
        workers
            .into_iter()
            .map(|worker| worker.join().unwrap_or_else(|panic| std::panic::resume_unwind(panic)))
            .collect()
    });
    results.into_iter().collect::<Result<(), _>>()?;
    Ok(images)
}

/// Decodes a run of items into `out`, reporting progress in batches; stops early once any
/// worker has failed.
fn decode_chunk(
    items: &[Item],
    out: &mut [u8],
    progress: &mpsc::Sender<usize>,
    cancelled: &AtomicBool,
) -> Result<(), DataError> {
    let mut unreported = 0;
    for (item, image) in items.iter().zip(out.chunks_exact_mut(IMAGE_BYTES)) {
        if cancelled.load(Ordering::Relaxed) {
            return Ok(());
        }
        if let Err(error) = decode_into(item, image) {
            cancelled.store(true, Ordering::Relaxed);
            return Err(error);
        }
        unreported += 1;
        if unreported == PROGRESS_BATCH_IMAGES {
            // The receiver outlives the workers; a failed send cannot happen.
            let _ = progress.send(unreported);
            unreported = 0;
        }
    }
    let _ = progress.send(unreported);
    Ok(())
}

/// Decodes one 32×32 image into CHW bytes (R plane, G plane, B plane), converting grayscale,
/// alpha and palette images to RGB.
fn decode_into(item: &Item, out: &mut [u8]) -> Result<(), DataError> {
    let read;
    let bytes = match &item.payload {
        Payload::Memory(bytes) => bytes,
        Payload::Disk(path) => {
            read = fs::read(path).map_err(|source| DataError::io(path, source))?;
            &read
        }
    };
    let decode_error = |source| DataError::Decode { path: item.shown.clone(), source };
    // The size from the header first: a small file can claim a huge image, which decoding
    // would allocate.
    let (width_px, height_px) = image::ImageReader::with_format(std::io::Cursor::new(bytes), item.format)
        .into_dimensions()
        .map_err(decode_error)?;
    if width_px != IMAGE_SIDE_PX || height_px != IMAGE_SIDE_PX {
        return Err(DataError::ImageSize { path: item.shown.clone(), width_px, height_px });
    }
    let decoded = image::load_from_memory_with_format(bytes, item.format).map_err(decode_error)?;
    let rgb = decoded.into_rgb8();
    let (red, rest) = out.split_at_mut(PLANE_PIXELS);
    let (green, blue) = rest.split_at_mut(PLANE_PIXELS);
    for ((pixel, r), (g, b)) in
        rgb.as_raw().chunks_exact(3).zip(red.iter_mut()).zip(green.iter_mut().zip(blue.iter_mut()))
    {
        *r = pixel[0];
        *g = pixel[1];
        *b = pixel[2];
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use image::{GrayImage, ImageBuffer, Luma, Rgb, RgbImage, Rgba, RgbaImage};
    use std::io::{Cursor, Write};

    /// A 32×32 test image whose pixels depend on `seed`.
    fn noisy_image(seed: u32) -> RgbImage {
        RgbImage::from_fn(32, 32, |x, y| {
            let v = (x * 31 + y * 17 + seed * 101).wrapping_mul(2_654_435_761) >> 8;
            Rgb([v as u8, (v >> 8) as u8, (v >> 16) as u8])
        })
    }

    /// A smooth 32×32 image (JPEG keeps it close) whose colours depend on `seed`.
    fn smooth_image(seed: u32) -> RgbImage {
        RgbImage::from_fn(32, 32, |x, y| Rgb([(x * 4 + seed) as u8, (y * 4) as u8, (seed * 20) as u8]))
    }

    /// The CHW bytes CIFAR-10 stores for `image`.
    fn chw(image: &RgbImage) -> Vec<u8> {
        (0..3).flat_map(|c| image.as_raw().chunks_exact(3).map(move |px| px[c])).collect()
    }

    fn encode(image: &RgbImage, format: ImageFormat) -> Vec<u8> {
        let mut bytes = Vec::new();
        image.write_to(&mut Cursor::new(&mut bytes), format).unwrap();
        bytes
    }

    /// A fixture file: relative path, encoded bytes, expected CHW pixels (for lossless files).
    struct Fixture {
        path: String,
        bytes: Vec<u8>,
        pixels: Vec<u8>,
    }

    /// train/{cat,airplane,dog} with 3/2/2 PNGs and test/ with 1 PNG each, under `prefix`.
    fn png_tree(prefix: &str) -> Vec<Fixture> {
        let counts = [("cat", 3, 1), ("airplane", 2, 1), ("dog", 2, 1)];
        let mut files = Vec::new();
        let mut seed = 0;
        for (class, train_n, test_n) in counts {
            for (split, n) in [("train", train_n), ("test", test_n)] {
                for i in (0..n).rev() {
                    seed += 1;
                    let image = noisy_image(seed);
                    files.push(Fixture {
                        path: format!("{prefix}{split}/{class}/img{i}.png"),
                        bytes: encode(&image, ImageFormat::Png),
                        pixels: chw(&image),
                    });
                }
            }
        }
        files
    }

    fn write_tree(root: &Path, files: &[Fixture]) {
        for file in files {
            let path = root.join(&file.path);
            fs::create_dir_all(path.parent().unwrap()).unwrap();
            fs::write(path, &file.bytes).unwrap();
        }
    }

    fn tar_bytes(files: &[Fixture]) -> Vec<u8> {
        let mut builder = tar::Builder::new(Vec::new());
        for file in files {
            let mut header = tar::Header::new_gnu();
            header.set_size(file.bytes.len() as u64);
            header.set_mode(0o644);
            header.set_cksum();
            builder.append_data(&mut header, &file.path, file.bytes.as_slice()).unwrap();
        }
        builder.into_inner().unwrap()
    }

    /// Pixels of `path` in `files`.
    fn pixels_of<'a>(files: &'a [Fixture], path: &str) -> &'a [u8] {
        &files.iter().find(|f| f.path.ends_with(path)).unwrap().pixels
    }

    fn run(src: &Path, out: &Path) -> Result<(ImportSummary, Vec<ImportProgress>), DataError> {
        let mut reports = Vec::new();
        let summary = import(src, out, &mut |p| reports.push(p))?;
        Ok((summary, reports))
    }

    /// Checks an imported PNG tree: labels, round-robin order and exact pixels.
    fn check_png_import(files: &[Fixture], out: &Path, summary: &ImportSummary) {
        assert_eq!(summary.classes, ["airplane", "cat", "dog"]);
        assert_eq!((summary.train_records, summary.test_records), (7, 3));
        let dataset = cifar::load_dir(out).unwrap();
        let train_order = [
            "train/airplane/img0.png",
            "train/cat/img0.png",
            "train/dog/img0.png",
            "train/airplane/img1.png",
            "train/cat/img1.png",
            "train/dog/img1.png",
            "train/cat/img2.png",
        ];
        assert_eq!(dataset.train.labels, [0, 1, 2, 0, 1, 2, 1]);
        for (i, path) in train_order.iter().enumerate() {
            assert_eq!(dataset.train.image(i), pixels_of(files, path), "{path}");
        }
        assert_eq!(dataset.test.labels, [0, 1, 2]);
        assert_eq!(dataset.test.image(1), pixels_of(files, "test/cat/img0.png"));
    }

    #[test]
    fn imports_a_directory_with_exact_pixels() {
        let temp = tempfile::tempdir().unwrap();
        let src = temp.path().join("src");
        let files = png_tree("");
        write_tree(&src, &files);
        fs::write(src.join("train/cat/.DS_Store"), b"junk").unwrap();
        let out = temp.path().join("out");
        fs::create_dir_all(&out).unwrap();
        fs::write(out.join(cifar::SYNTHETIC_MARKER), "stale").unwrap();
        let (summary, reports) = run(&src, &out).unwrap();
        check_png_import(&files, &out, &summary);
        assert_eq!(summary.out_dir, out);
        assert!(!cifar::is_synthetic_dir(&out));
        assert_eq!(
            reports.last(),
            Some(&ImportProgress { stage: ImportStage::Decoding, images_done: 10, images_total: Some(10) })
        );
    }

    #[test]
    fn imports_a_wrapped_directory() {
        let temp = tempfile::tempdir().unwrap();
        let files = png_tree("cifar-png/");
        write_tree(temp.path(), &files);
        let out = temp.path().join("out");
        let (summary, _) = run(temp.path(), &out).unwrap();
        check_png_import(&files, &out, &summary);
    }

    #[test]
    fn imports_a_wrapped_tar_and_tgz() {
        let temp = tempfile::tempdir().unwrap();
        let files = png_tree("./cifar-png/");
        let tar = tar_bytes(&files);
        let tar_path = temp.path().join("images.tar");
        fs::write(&tar_path, &tar).unwrap();
        let (summary, _) = run(&tar_path, &temp.path().join("out-tar")).unwrap();
        check_png_import(&files, &temp.path().join("out-tar"), &summary);

        let tgz_path = temp.path().join("images.tgz");
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        gz.write_all(&tar).unwrap();
        fs::write(&tgz_path, gz.finish().unwrap()).unwrap();
        let (summary, _) = run(&tgz_path, &temp.path().join("out-tgz")).unwrap();
        check_png_import(&files, &temp.path().join("out-tgz"), &summary);
    }

    #[test]
    fn imports_jpeg_and_converts_gray_and_rgba_png() {
        let temp = tempfile::tempdir().unwrap();
        let jpeg = smooth_image(3);
        let gray = GrayImage::from_fn(32, 32, |x, y| Luma([(x * 8 + y) as u8]));
        let rgba = RgbaImage::from_fn(32, 32, |x, y| Rgba([x as u8, y as u8, 7, 128]));
        let mut gray_png = Vec::new();
        gray.write_to(&mut Cursor::new(&mut gray_png), ImageFormat::Png).unwrap();
        let mut rgba_png = Vec::new();
        rgba.write_to(&mut Cursor::new(&mut rgba_png), ImageFormat::Png).unwrap();
        let files = [
            ("train/a/x.JPG", encode(&jpeg, ImageFormat::Jpeg)),
            ("train/b/y.png", gray_png),
            ("test/a/z.jpeg", encode(&smooth_image(9), ImageFormat::Jpeg)),
            ("test/b/w.png", rgba_png),
        ]
        .map(|(path, bytes)| Fixture { path: path.to_owned(), bytes, pixels: Vec::new() });
        let tar_path = temp.path().join("mixed.tar");
        fs::write(&tar_path, tar_bytes(&files)).unwrap();
        let out = temp.path().join("out");
        run(&tar_path, &out).unwrap();
        let dataset = cifar::load_dir(&out).unwrap();
        assert_eq!(dataset.train.labels, [0, 1]);
        let max_error =
            chw(&jpeg).iter().zip(dataset.train.image(0)).map(|(a, b)| a.abs_diff(*b)).max().unwrap();
        assert!(max_error <= 16, "JPEG round trip error {max_error}");
        let gray_chw: Vec<u8> = gray.as_raw().repeat(3);
        assert_eq!(dataset.train.image(1), gray_chw.as_slice());
        let rgba_rgb = ImageBuffer::from_fn(32, 32, |x, y| Rgb([x as u8, y as u8, 7]));
        assert_eq!(dataset.test.image(1), chw(&rgba_rgb).as_slice());
    }

    #[test]
    fn wrong_size_image_is_named() {
        let temp = tempfile::tempdir().unwrap();
        let mut files = png_tree("");
        let big = RgbImage::from_pixel(33, 32, Rgb([1, 2, 3]));
        files[4].bytes = encode(&big, ImageFormat::Png);
        write_tree(temp.path(), &files);
        let error = run(temp.path(), &temp.path().join("out")).unwrap_err();
        let message = error.to_string();
        assert!(message.contains(&files[4].path), "{message}");
        assert!(message.contains("33×32 pixels, expected 32×32"), "{message}");
    }

    #[test]
    fn a_huge_image_is_refused_by_its_header_before_it_is_decoded() {
        // A PNG header claiming 30000×30000 pixels (2.7 GB decoded) and no pixel data.
        const EMPTY_ZLIB: [u8; 8] = [0x78, 0x9c, 0x03, 0x00, 0x00, 0x00, 0x00, 0x01];
        let chunk = |kind: &[u8], data: &[u8]| {
            let mut crc = flate2::Crc::new();
            crc.update(kind);
            crc.update(data);
            [&(data.len() as u32).to_be_bytes()[..], kind, data, &crc.sum().to_be_bytes()].concat()
        };
        let header = [&30_000u32.to_be_bytes()[..], &30_000u32.to_be_bytes(), &[8, 2, 0, 0, 0]].concat();
        let png = [
            &b"\x89PNG\r\n\x1a\n"[..],
            &chunk(b"IHDR", &header),
            &chunk(b"IDAT", &EMPTY_ZLIB),
            &chunk(b"IEND", &[]),
        ]
        .concat();
        let mut files = png_tree("");
        files[0].bytes = png;
        let temp = tempfile::tempdir().unwrap();
        write_tree(temp.path(), &files);
        let error = run(temp.path(), &temp.path().join("out")).unwrap_err();
        assert!(matches!(error, DataError::ImageSize { width_px: 30_000, height_px: 30_000, .. }), "{error}");
        assert!(error.to_string().contains(&files[0].path), "{error}");
    }

    #[test]
    fn validation_decodes_the_images_a_run_reads_and_names_a_bad_one() {
        let temp = tempfile::tempdir().unwrap();
        let mut files = png_tree("");
        write_tree(temp.path(), &files);
        let sizes = validate(temp.path(), None, None).unwrap();
        assert_eq!(sizes, cifar::SplitSizes { train: 7, test: 3 });
        // The last training image in the run's order (train/cat/img2.png) is cut short.
        let last = files.iter_mut().find(|f| f.path == "train/cat/img2.png").unwrap();
        last.bytes.truncate(20);
        write_tree(temp.path(), &files);
        let error = validate(temp.path(), None, None).unwrap_err();
        assert!(
            matches!(error, DataError::Decode { .. }) && error.to_string().contains("img2.png"),
            "{error}"
        );
        assert!(validate(temp.path(), Some(6), None).is_ok(), "a profile reading 6 images never reads it");
        let missing = validate(&temp.path().join("absent.tar"), None, None).unwrap_err();
        assert!(missing.to_string().contains("absent.tar"), "{missing}");
    }

    #[test]
    fn corrupt_image_is_named() {
        let temp = tempfile::tempdir().unwrap();
        let mut files = png_tree("");
        files[2].bytes.truncate(20);
        write_tree(temp.path(), &files);
        let error = run(temp.path(), &temp.path().join("out")).unwrap_err();
        assert!(matches!(error, DataError::Decode { .. }), "{error}");
        assert!(error.to_string().contains(&files[2].path), "{error}");
    }

    #[test]
    fn unsupported_extension_is_named() {
        let temp = tempfile::tempdir().unwrap();
        let files = png_tree("");
        write_tree(temp.path(), &files);
        fs::write(temp.path().join("test/dog/notes.gif"), b"GIF89a").unwrap();
        let message = run(temp.path(), &temp.path().join("out")).unwrap_err().to_string();
        assert!(message.contains("test/dog/notes.gif"), "{message}");
        assert!(message.contains("unsupported file type"), "{message}");
    }

    #[test]
    fn class_lists_must_match() {
        let temp = tempfile::tempdir().unwrap();
        let files: Vec<Fixture> =
            png_tree("").into_iter().filter(|f| f.path != "test/dog/img0.png").collect();
        write_tree(temp.path(), &files);
        let message = run(temp.path(), &temp.path().join("out")).unwrap_err().to_string();
        assert!(message.contains("same classes"), "{message}");
    }

    #[test]
    fn more_than_ten_classes_are_rejected() {
        let temp = tempfile::tempdir().unwrap();
        let image = encode(&noisy_image(1), ImageFormat::Png);
        let files: Vec<Fixture> = (0..11)
            .flat_map(|c| ["train", "test"].map(|split| (c, split)))
            .map(|(c, split)| Fixture {
                path: format!("{split}/class{c:02}/a.png"),
                bytes: image.clone(),
                pixels: Vec::new(),
            })
            .collect();
        write_tree(temp.path(), &files);
        let message = run(temp.path(), &temp.path().join("out")).unwrap_err().to_string();
        assert!(message.contains("11 classes found"), "{message}");
    }

    /// A tar holding a valid tree plus one entry whose header is written raw (bypassing the
    /// builder's own path checks).
    fn tar_with_raw_entry(name: &str, entry_type: tar::EntryType, link: Option<&str>) -> Vec<u8> {
        let mut builder = tar::Builder::new(Vec::new());
        for file in png_tree("") {
            let mut header = tar::Header::new_gnu();
            header.set_size(file.bytes.len() as u64);
            header.set_mode(0o644);
            header.set_cksum();
            builder.append_data(&mut header, &file.path, file.bytes.as_slice()).unwrap();
        }
        let payload = b"evil";
        let mut header = tar::Header::new_old();
        header.as_old_mut().name[..name.len()].copy_from_slice(name.as_bytes());
        if let Some(target) = link {
            header.as_old_mut().linkname[..target.len()].copy_from_slice(target.as_bytes());
        }
        header.set_entry_type(entry_type);
        header.set_mode(0o644);
        let size = if entry_type.is_file() { payload.len() } else { 0 };
        header.set_size(size as u64);
        header.set_cksum();
        builder.append(&header, &payload[..size]).unwrap();
        builder.into_inner().unwrap()
    }

    #[test]
    fn unsafe_tar_entries_are_rejected_without_writing() {
        let cases = [
            ("../evil.png", tar::EntryType::Regular, None, "`..`"),
            ("train/cat/../../../evil.png", tar::EntryType::Regular, None, "`..`"),
            ("/tmp/evil.png", tar::EntryType::Regular, None, "absolute"),
            ("train/cat/link.png", tar::EntryType::Symlink, Some("/etc/passwd"), "links"),
            ("train/cat/hard.png", tar::EntryType::Link, Some("train/cat/img0.png"), "links"),
            ("train/cat/fifo.png", tar::EntryType::Fifo, None, "not a regular file"),
        ];
        for (name, entry_type, link, reason) in cases {
            let temp = tempfile::tempdir().unwrap();
            let work = temp.path().join("work");
            fs::create_dir(&work).unwrap();
            let tar_path = temp.path().join("bad.tar");
            fs::write(&tar_path, tar_with_raw_entry(name, entry_type, link)).unwrap();
            let out = work.join("out");
            let error = run(&tar_path, &out).unwrap_err();
            assert!(
                matches!(&error, DataError::UnsafeEntry { entry, .. } if entry == name),
                "{name}: {error}"
            );
            let message = error.to_string();
            assert!(message.contains("bad.tar") && message.contains(name), "{message}");
            assert!(message.contains(reason), "{message}");
            assert!(!out.exists(), "{name}: nothing is written");
            assert_eq!(fs::read_dir(&work).unwrap().count(), 0, "{name}");
            assert_eq!(fs::read_dir(temp.path()).unwrap().count(), 2, "{name}");
        }
    }

    #[test]
    fn an_entry_claiming_a_terabyte_is_an_error_not_an_allocation() {
        let mut builder = tar::Builder::new(Vec::new());
        let mut header = tar::Header::new_gnu();
        header.set_path("train/cat/huge.png").unwrap();
        header.set_size(1 << 40);
        header.set_mode(0o644);
        header.set_cksum();
        builder.append(&header, &b"not a terabyte"[..]).unwrap();
        let temp = tempfile::tempdir().unwrap();
        let tar_path = temp.path().join("huge.tar");
        fs::write(&tar_path, builder.into_inner().unwrap()).unwrap();
        let message = run(&tar_path, &temp.path().join("out")).unwrap_err().to_string();
        assert!(message.contains("huge.tar"), "{message}");
        assert!(!temp.path().join("out").exists());
    }

    #[test]
    fn source_without_splits_is_rejected() {
        let temp = tempfile::tempdir().unwrap();
        fs::create_dir_all(temp.path().join("a")).unwrap();
        fs::create_dir_all(temp.path().join("b")).unwrap();
        let message = run(temp.path(), &temp.path().join("out")).unwrap_err().to_string();
        assert!(message.contains("no train/ and test/ folders"), "{message}");
    }
}
