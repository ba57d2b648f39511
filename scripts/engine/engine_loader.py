"""The PyTorch engine's data pipeline: a torch.utils.data.DataLoader that assembles each batch from
the case's data as a PyTorch training script's loader would, and the training process's end of it
(the copy to the device, augmentation there, conversion to float, standardisation, layout).

trickbench's loader and this one take the same images (or token windows) in the same order, and
crop and flip each training image as the case's schedule says; what differs between the sides of
a case is only how, which is what the loader tricks change:

    baseline         DataLoader(num_workers=0): each batch assembled in the training process,
                     image by image (numpy crops of the images held in memory), then copied into
                     a new tensor with torch.tensor; pageable memory, blocking copies
    loader-workers   DataLoader(num_workers=N): N worker processes assemble batches ahead
    pin-memory       DataLoader(pin_memory=True) and .to(device, non_blocking=True), where the
                     engine's device has pinned memory (a CUDA device: engine_device.py)
    zero-copy        torch.from_numpy instead of torch.tensor; unaugmented batches gathered from
                     the split held as one tensor (index_select) instead of image by image
    gpu-augment      no host crops: the whole batch cropped and flipped on the device, with
                     offsets drawn there
    packed-dataset   where the case holds JPEG/PNG files: decoded once when the side is built,
                     instead of every time a batch takes an image (Pillow, as torchvision's
                     ImageFolder decodes)

It needs torch and numpy (which every torch.utils.data pipeline over in-memory arrays uses).
"""

import dataclasses
import io

import numpy as np
import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, Dataset, Sampler

# Per-channel mean and standard deviation of the CIFAR-10 training images (pixels in [0, 1]).
CIFAR_MEAN = (0.4914, 0.4822, 0.4465)
CIFAR_STD = (0.2470, 0.2435, 0.2616)
# Zero padding on each side of an image before its random crop, pixels.
CROP_PADDING_PX = 4


class DataError(Exception):
    """The case's data file does not hold what the case says."""


class Unsupported(Exception):
    """This Python cannot assemble the batches (no image decoder): the side is not applicable."""


@dataclasses.dataclass
class ImageData:
    """CIFAR images and the batches scheduled from them."""

    images: np.ndarray | None  # uint8 [M, C, H, W], or None where the files are encoded
    encoded: list | None  # M JPEG/PNG files as bytes, or None
    labels: np.ndarray  # int64 [M]
    index: list  # per batch, int64 [B] into the images
    crops: list | None  # per batch, int64 [B, 3] (dx, dy, flip), or None (unaugmented)
    standardise: bool


@dataclasses.dataclass
class TextData:
    """A token split and the windows scheduled from it."""

    tokens: np.ndarray  # int32 [L]
    starts: list  # per batch, int64 [B]
    context: int


@dataclasses.dataclass
class Pipeline:
    """The loader tricks of one side (pinned: pinned memory and non-blocking copies, where the
    device has them)."""

    workers: int = 0
    pinned: bool = False
    zero_copy: bool = False
    device_augment: bool = False
    packed: bool = False


def image_data(tensors, path, batches, augment, standardise, encoded):
    """ImageData from the data file's tensors (read from `path`); DataError where they do not
    hold `batches` batches as the case says."""
    labels = numpy_of(tensors, "labels", path, dims=1)
    count = len(labels)
    images = files = None
    if encoded:
        blob = numpy_of(tensors, "encoded", path, dims=1)
        offsets = numpy_of(tensors, "offsets", path, dims=1)
        if len(offsets) != count + 1 or offsets[0] != 0 or np.any(np.diff(offsets) < 0) or offsets[-1] != len(blob):
            raise DataError(f"{path}: offsets must rise from 0 to the {len(blob)} encoded bytes, one more than labels")
        files = [blob[offsets[i] : offsets[i + 1]].tobytes() for i in range(count)]
    else:
        images = numpy_of(tensors, "images", path, dims=4)
        if images.dtype != np.uint8 or len(images) != count:
            raise DataError(f"{path}: images must be uint8 [{count}, C, H, W], got {images.dtype} {list(images.shape)}")
    index, crops = [], [] if augment else None
    for k in range(batches):
        rows = numpy_of(tensors, f"index.{k}", path, dims=1)
        if len(rows) == 0 or rows.min() < 0 or rows.max() >= count:
            raise DataError(f"{path}: index.{k} must index the {count} images")
        index.append(rows)
        if augment:
            crop = numpy_of(tensors, f"crop.{k}", path, dims=2)
            limit = 2 * CROP_PADDING_PX
            fits = crop.shape == (len(rows), 3) and crop[:, :2].min() >= 0 and crop[:, :2].max() <= limit
            if not fits or not np.isin(crop[:, 2], (0, 1)).all():
                raise DataError(f"{path}: crop.{k} must hold (dx, dy in 0..={limit}, flip 0|1) for each image of index.{k}")
            crops.append(crop)
    return ImageData(images, files, labels, index, crops, standardise)


def text_data(tensors, path, batches, context):
    """TextData from the data file's tensors; DataError where a window would leave the split."""
    tokens = numpy_of(tensors, "tokens", path, dims=1)
    if len(tokens) <= context:
        raise DataError(f"{path}: tokens: {len(tokens)} tokens, but a window of context {context} needs {context + 1}")
    starts = []
    for k in range(batches):
        rows = numpy_of(tensors, f"starts.{k}", path, dims=1)
        if len(rows) == 0 or rows.min() < 0 or rows.max() > len(tokens) - context - 1:
            raise DataError(f"{path}: starts.{k} must start windows of {context + 1} tokens inside the split")
        starts.append(rows)
    return TextData(tokens, starts, context)


def numpy_of(tensors, name, path, dims):
    """Tensor `name` of the data file as a numpy array of `dims` dimensions."""
    if name not in tensors:
        raise DataError(f"{path}: no tensor {name}")
    tensor = tensors[name]
    if tensor.dim() != dims or tensor.is_floating_point():
        raise DataError(f"{path}: {name} must be an integer tensor of {dims} dimensions, got {tensor.dtype} {list(tensor.shape)}")
    return tensor.numpy()


# ---- Assembling batches on the host ----


def decode(file):
    """One JPEG/PNG file's pixels, uint8 [3, H, W]; Unsupported without Pillow."""
    try:
        from PIL import Image
    except ImportError:
        raise Unsupported(
            "decoding the run's JPEG/PNG files needs Pillow (what torchvision's ImageFolder decodes with), "
            "which this Python lacks"
        ) from None
    with Image.open(io.BytesIO(file)) as image:
        return np.asarray(image.convert("RGB")).transpose(2, 0, 1)


def crop_and_flip(image, out, dx, dy, flip):
    """Writes into `out` the window of `image` ([C, H, W]) at column `dx`, row `dy` of the image
    zero-padded by CROP_PADDING_PX on each side, mirrored horizontally when `flip`."""
    _, h, w = image.shape
    pad = CROP_PADDING_PX
    out.fill(0)
    y0, y1 = max(0, pad - dy), min(h, h + pad - dy)
    x0, x1 = max(0, pad - dx), min(w, w + pad - dx)
    window = image[:, y0 + dy - pad : y1 + dy - pad, x0 + dx - pad : x1 + dx - pad]
    if flip:
        out[:, y0:y1, w - x1 : w - x0] = window[:, :, ::-1]
    else:
        out[:, y0:y1, x0:x1] = window


class ImageBatches(Dataset):
    """Item k is scheduled batch k of the images, assembled on the host: every image taken (and
    decoded, where the files are encoded and not packed), cropped and flipped as scheduled unless
    the device augments, into one buffer; then a tensor of it, copied (torch.tensor) or shared
    (torch.from_numpy under zero-copy). Under zero-copy an unaugmented batch of packed images is
    gathered from the split held as one tensor instead."""

    def __init__(self, data, pipeline):
        self.data, self.zero_copy = data, pipeline.zero_copy
        self.host_augment = data.crops is not None and not pipeline.device_augment
        self.pixels = data.images
        if data.encoded is not None and pipeline.packed:
            self.pixels = np.stack([decode(file) for file in data.encoded])
        elif data.encoded is not None:
            decode(data.encoded[0])  # Unsupported now, at build, where there is no decoder
        self.split = None
        if self.zero_copy and not self.host_augment and self.pixels is not None:
            self.split = (torch.from_numpy(self.pixels), torch.from_numpy(data.labels))

    def __len__(self):
        return len(self.data.index)

    def image(self, i):
        """Image i's pixels, decoded now where they are not held decoded."""
        return self.pixels[i] if self.pixels is not None else decode(self.data.encoded[i])

    def __getitem__(self, k):
        index = self.data.index[k]
        if self.split is not None:
            rows = torch.from_numpy(index)
            return self.split[0].index_select(0, rows), self.split[1].index_select(0, rows)
        first = self.image(index[0])
        host = np.empty((len(index), *first.shape), dtype=np.uint8)
        crops = self.data.crops[k] if self.host_augment else None
        for j, i in enumerate(index):
            image = first if j == 0 else self.image(i)
            if crops is None:
                host[j] = image
            else:
                crop_and_flip(image, host[j], crops[j, 0], crops[j, 1], crops[j, 2])
        images = torch.from_numpy(host) if self.zero_copy else torch.tensor(host)
        return images, torch.tensor(self.data.labels[index])


class TextBatches(Dataset):
    """Item k is scheduled batch k of token windows ([B, context + 1] int64) assembled on the host,
    copied into a new tensor (torch.tensor) or shared (torch.from_numpy under zero-copy)."""

    def __init__(self, data, pipeline):
        self.data, self.zero_copy = data, pipeline.zero_copy

    def __len__(self):
        return len(self.data.starts)

    def __getitem__(self, k):
        starts, width = self.data.starts[k], self.data.context + 1
        host = np.empty((len(starts), width), dtype=np.int64)
        for j, start in enumerate(starts):
            host[j] = self.data.tokens[start : start + width]
        return torch.from_numpy(host) if self.zero_copy else torch.tensor(host)


class Cycle(Sampler):
    """Batch numbers 0, 1, …, n − 1, 0, 1, … without end."""

    def __init__(self, n):
        self.n = n

    def __iter__(self):
        k = 0
        while True:
            yield k % self.n
            k += 1


# ---- On the device ----


def random_crop_and_flip(images):
    """Each image of a batch ([N, C, H, W], on its device) cropped at offsets uniform in
    0..=2·CROP_PADDING_PX of its zero-padded copy and mirrored with probability ½, the offsets
    and flips drawn on the device: one pad and one gather for the whole batch."""
    n, _, h, w = images.shape
    device, pad = images.device, CROP_PADDING_PX
    dx = torch.randint(2 * pad + 1, (n,), device=device)
    dy = torch.randint(2 * pad + 1, (n,), device=device)
    flip = torch.randint(2, (n,), device=device).bool()
    padded = F.pad(images, (pad, pad, pad, pad))
    across = torch.arange(w, device=device)
    rows = dy[:, None] + torch.arange(h, device=device)
    cols = dx[:, None] + torch.where(flip[:, None], across.flip(0), across)
    batch = torch.arange(n, device=device)[:, None, None]
    return padded.permute(0, 2, 3, 1)[batch, rows[:, :, None], cols[:, None, :]].permute(0, 3, 1, 2).contiguous()


class Loader:
    """A side's batches on its device: the DataLoader over the scheduled batches, cycled without
    end, and the training process's end of each batch."""

    def __init__(self, data, pipeline, device, dtype, channels_last):
        self.data, self.pipeline, self.device, self.dtype = data, pipeline, device, dtype
        self.channels_last = channels_last
        self.pinned = pipeline.pinned
        images = isinstance(data, ImageData)
        self.dataset = ImageBatches(data, pipeline) if images else TextBatches(data, pipeline)
        self.samples_per_batch = len(data.index[0]) if images else len(data.starts[0]) * data.context
        self.scale = self.shift = None
        if images and data.standardise:
            std = torch.tensor(CIFAR_STD, device=device).view(1, 3, 1, 1)
            self.scale = 1.0 / (255.0 * std)
            self.shift = -torch.tensor(CIFAR_MEAN, device=device).view(1, 3, 1, 1) / std
        workers = pipeline.workers
        self.loader = DataLoader(
            self.dataset,
            batch_size=None,
            sampler=Cycle(len(self.dataset)),
            num_workers=workers,
            pin_memory=self.pinned,
            prefetch_factor=2 if workers else None,
        )
        self.iterator = iter(self.loader)

    def next_host(self):
        """The DataLoader's next batch, on the host."""
        return next(self.iterator)

    def first(self):
        """Batch 0, assembled and placed here without advancing the loader or augmenting on the
        device (for inspection: it draws no random numbers)."""
        return self.place(self.dataset[0], augment=False)

    def facts(self):
        """How the side's batches are made, for checks."""
        p, images = self.pipeline, isinstance(self.data, ImageData)
        augment = None
        if images and self.data.crops is not None:
            augment = "device" if p.device_augment else "host"
        decoded = None
        if images and self.data.encoded is not None:
            decoded = "once" if self.dataset.pixels is not None else "every-batch"
        return {
            "workers": self.loader.num_workers,
            "pinned": self.loader.pin_memory,
            "zero_copy": p.zero_copy,
            "augment": augment,
            "decoded": decoded,
            "gathered": images and self.dataset.split is not None,
        }

    def place(self, batch, augment=True):
        """A host batch from the DataLoader on the device, as the model takes it."""
        if isinstance(self.data, TextData):
            windows = batch.to(self.device, non_blocking=self.pinned)
            return windows[:, :-1].contiguous(), windows[:, 1:].contiguous()
        images, labels = batch
        x = images.to(self.device, non_blocking=self.pinned)
        if augment and self.pipeline.device_augment and self.data.crops is not None:
            x = random_crop_and_flip(x)
        x = x.float()
        x = x * self.scale + self.shift if self.scale is not None else x / 255.0
        if self.channels_last:
            x = x.contiguous(memory_format=torch.channels_last)
        if self.dtype != torch.float32:
            x = x.to(self.dtype)
        return x, labels.to(self.device, non_blocking=self.pinned)

    def close(self):
        """Stops the worker processes, if any: the last reference to a DataLoader's iterator
        going shuts its workers down and joins them."""
        self.iterator = None
