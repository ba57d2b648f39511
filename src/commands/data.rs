//! `trickbench data fetch|import|synth`.

use std::path::Path;

use anyhow::{Context, Result};
use indicatif::{ProgressBar, ProgressStyle};

use trickbench::data::{cifar, fetch, import, synth};

use crate::cli::{Dataset, FetchArgs, ImportArgs, SynthArgs};

/// Downloads a dataset, verifying its checksum.
pub fn fetch(args: &FetchArgs) -> Result<()> {
    let source = match args.dataset {
        Dataset::Cifar10 => fetch::cifar10_source(),
        Dataset::Shakespeare => fetch::shakespeare_source(),
    };
    let source = match &args.url {
        Some(url) => source.with_url(url.clone()),
        None => source,
    };
    let bar = ProgressBar::new(0).with_style(
        ProgressStyle::with_template("{msg} {wide_bar} {bytes}/{total_bytes} ({bytes_per_sec}, {eta})")
            .expect("valid template"),
    );
    bar.set_message(format!("downloading {}", source.url));
    let summary = fetch::fetch(&source, &args.out, &mut |p| {
        if let Some(total) = p.bytes_total {
            bar.set_length(total);
        }
        bar.set_position(p.bytes_done);
    })
    .with_context(|| format!("fetching {} into {}", source.name, args.out.display()))?;
    bar.finish_and_clear();
    if args.dataset == Dataset::Cifar10 {
        cifar::remove_synthetic_marker(&args.out)?;
    }
    if summary.already_present {
        println!("{} is already in {} (checksum {})", source.name, args.out.display(), summary.sha256);
    } else {
        println!(
            "{}: {} bytes downloaded, sha256 {} verified, {} files in {}",
            source.name,
            summary.bytes_downloaded,
            summary.sha256,
            summary.files.len(),
            args.out.display()
        );
    }
    Ok(())
}

/// Converts an ImageFolder tree or tar to the CIFAR-10 binary format.
pub fn import(args: &ImportArgs) -> Result<()> {
    let bar = ProgressBar::new_spinner().with_style(
        ProgressStyle::with_template("{msg} {wide_bar} {pos}/{len} images ({per_sec}, {eta})")
            .expect("valid template"),
    );
    bar.set_message(format!("importing {}", args.path.display()));
    let summary = import::import(&args.path, &args.out, &mut |p| {
        if let Some(total) = p.images_total {
            bar.set_length(total as u64);
        }
        bar.set_position(p.images_done as u64);
    })
    .with_context(|| format!("importing {} into {}", args.path.display(), args.out.display()))?;
    bar.finish_and_clear();
    println!(
        "{} training and {} test images ({} classes: {}) written to {}",
        summary.train_records,
        summary.test_records,
        summary.classes.len(),
        summary.classes.join(", "),
        summary.out_dir.display()
    );
    Ok(())
}

/// Writes a synthetic dataset.
pub fn synth(args: &SynthArgs) -> Result<()> {
    write_synthetic(&args.out, args.train, args.test, args.seed)?;
    println!(
        "synthetic CIFAR-10-format data ({} train, {} test) written to {}",
        args.train,
        args.test,
        args.out.display()
    );
    Ok(())
}

/// Writes synthetic data to `dir`.
fn write_synthetic(dir: &Path, train: usize, test: usize, seed: u64) -> Result<()> {
    synth::write_synthetic(dir, train, test, seed)
        .with_context(|| format!("writing synthetic data to {}", dir.display()))
}
