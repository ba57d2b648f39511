//! The PNG files of the plots, as 8-bit indexed-colour images: a chart's flat fills and the
//! anti-aliased edges of its text and lines come to a few hundred colours, which a palette of 256
//! holds exactly or nearly, at a third of the bytes or less of an RGB file.
//!
//! The palette is the image's 256 most frequent colours (ties by colour value, so the same pixels
//! always give the same bytes); every other colour, which covers a few edge pixels, is drawn in its
//! nearest palette colour. No dithering: an image of at most 256 colours is stored exactly.

use std::collections::HashMap;

/// Colours a palette holds (8-bit indices).
const PALETTE_COLOURS: usize = 256;

/// Encodes the `width_px` × `height_px` image `rgb` (3 bytes per pixel, row by row) as an
/// indexed-colour PNG at the `png` crate's highest compression level, rows unfiltered.
pub(super) fn encode(width_px: u32, height_px: u32, rgb: &[u8]) -> Result<Vec<u8>, String> {
    let bytes = width_px as usize * height_px as usize * 3;
    if rgb.len() != bytes {
        return Err(format!("a {width_px}×{height_px} image needs {bytes} RGB bytes, not {}", rgb.len()));
    }
    let (palette, indices) = quantise(rgb);
    let mut file = Vec::new();
    let mut encoder = png::Encoder::new(&mut file, width_px, height_px);
    encoder.set_color(png::ColorType::Indexed);
    encoder.set_depth(png::BitDepth::Eight);
    encoder.set_palette(palette.iter().flat_map(|&c| rgb_of(c)).collect::<Vec<u8>>());
    encoder.set_compression(png::Compression::High);
    // Row filters predict a byte from its neighbours' values, which palette indices do not follow:
    // unfiltered rows compress better (by about 13% on the committed charts).
    encoder.set_filter(png::Filter::NoFilter);
    let failed = |e: png::EncodingError| format!("encoding PNG: {e}");
    let mut writer = encoder.write_header().map_err(failed)?;
    writer.write_image_data(&indices).map_err(failed)?;
    writer.finish().map_err(failed)?;
    Ok(file)
}

/// A colour as one integer, `0xRRGGBB`.
type Packed = u32;

fn pack(pixel: &[u8]) -> Packed {
    u32::from(pixel[0]) << 16 | u32::from(pixel[1]) << 8 | u32::from(pixel[2])
}

fn rgb_of(colour: Packed) -> [u8; 3] {
    [(colour >> 16) as u8, (colour >> 8) as u8, colour as u8]
}

/// The palette of `rgb` and each pixel's index into it. A chart is mostly runs of one colour
/// along its rows, so colours are counted and looked up once per run, not per pixel.
fn quantise(rgb: &[u8]) -> (Vec<Packed>, Vec<u8>) {
    let pixels: Vec<Packed> = rgb.chunks_exact(3).map(pack).collect();
    let mut counts: HashMap<Packed, usize> = HashMap::new();
    for run in pixels.chunk_by(|a, b| a == b) {
        *counts.entry(run[0]).or_insert(0) += run.len();
    }
    let mut by_frequency: Vec<(Packed, usize)> = counts.into_iter().collect();
    by_frequency.sort_unstable_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
    let palette: Vec<Packed> = by_frequency.iter().take(PALETTE_COLOURS).map(|&(c, _)| c).collect();
    let index: HashMap<Packed, u8> =
        by_frequency.iter().map(|&(colour, _)| (colour, nearest(&palette, colour))).collect();
    let mut indices = Vec::with_capacity(pixels.len());
    for run in pixels.chunk_by(|a, b| a == b) {
        indices.extend(std::iter::repeat_n(index[&run[0]], run.len()));
    }
    (palette, indices)
}

/// The index of the palette colour nearest `colour` in squared RGB distance (the first of equals);
/// a palette colour's own index.
fn nearest(palette: &[Packed], colour: Packed) -> u8 {
    let [r, g, b] = rgb_of(colour).map(i32::from);
    let distance = |&c: &Packed| {
        let [pr, pg, pb] = rgb_of(c).map(i32::from);
        (pr - r).pow(2) + (pg - g).pow(2) + (pb - b).pow(2)
    };
    let closest = palette.iter().enumerate().min_by_key(|&(i, c)| (distance(c), i));
    // The palette holds at most 256 colours, so every index fits a byte.
    closest.map_or(0, |(i, _)| i as u8)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Decodes a PNG with `image`, as any reader would, to RGB bytes.
    fn decoded(png: &[u8]) -> (u32, u32, Vec<u8>) {
        let image = image::load_from_memory_with_format(png, image::ImageFormat::Png).unwrap().to_rgb8();
        (image.width(), image.height(), image.into_raw())
    }

    /// A `width` × `height` image whose pixel `i` has colour `colour(i)`.
    fn image(width: u32, height: u32, colour: impl Fn(usize) -> [u8; 3]) -> Vec<u8> {
        (0..(width * height) as usize).flat_map(colour).collect()
    }

    #[test]
    fn an_image_of_at_most_256_colours_is_stored_exactly_and_the_same_way_twice() {
        // 256 colours, one per pixel.
        let rgb = image(64, 4, |i| [i as u8, (i * 7) as u8, 255 - i as u8]);
        let png = encode(64, 4, &rgb).unwrap();
        assert_eq!(decoded(&png), (64, 4, rgb.clone()));
        assert_eq!(png, encode(64, 4, &rgb).unwrap(), "the same pixels give the same bytes");
        let info = png::Decoder::new(std::io::Cursor::new(&png)).read_info().unwrap().info().clone();
        assert_eq!(info.color_type, png::ColorType::Indexed);
    }

    #[test]
    fn colours_beyond_the_palette_are_drawn_in_their_nearest_palette_colour() {
        // 256 frequent colours (4 pixels each), then two rare ones near two of them.
        let frequent = |k: usize| [(k % 16 * 16) as u8, (k / 16 * 16) as u8, 100];
        let mut rgb = image(32, 32, |i| frequent(i / 4));
        let rare = [[(3 * 16 + 2) as u8, (5 * 16 + 1) as u8, 101], [250, 250, 97]];
        rgb.extend(rare.iter().flatten());
        let png = encode(1026, 1, &rgb).unwrap();
        let (_, _, pixels) = decoded(&png);
        assert_eq!(pixels[..1024 * 3], rgb[..1024 * 3], "the palette's colours are kept");
        assert_eq!(pixels[1024 * 3..], [48, 80, 100, 240, 240, 100], "each rare colour is its nearest");
    }

    #[test]
    fn a_buffer_of_the_wrong_size_is_refused() {
        let error = encode(2, 2, &[0; 11]).unwrap_err();
        assert!(error.contains("2×2") && error.contains("11"), "{error}");
    }
}
