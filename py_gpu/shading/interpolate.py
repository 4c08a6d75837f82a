"""Attribute interpolation at fragments: per-vertex attributes by barycentrics, per-face by gather.

Differentiable with respect to the attributes and, through ``fragments.bary``, the vertex
positions (when the fragments come from the torch backend).
"""

from __future__ import annotations

import torch

from .._check import (PyGpuTypeError, PyGpuValueError, check_finite, check_float, check_shape, check_tensor,
                      checks_enabled)
from ..contracts import Fragments

_KINDS = (None, "vertex", "face")


def interpolate(attributes: torch.Tensor, fragments: Fragments, faces: torch.Tensor, *, kind: str | None = None) -> torch.Tensor:
    """Attributes at every fragment.

    Args:
        attributes: float ``[B, V, C]`` per-vertex or ``[B, F, C]`` per-face attributes (a
            ``[V|F, C]`` tensor is broadcast over ``B``; a batch of 1 too).
        fragments: ``Fragments`` with ``face_index`` int64 ``[B, H, W, K]`` and ``bary`` float
            ``[B, H, W, K, 3]`` (perspective-correct for clip-space input).
        faces: int64 (or int32) ``[F, 3]``, the face list the fragments index.
        kind: ``"vertex"`` or ``"face"``. By default it is inferred: per-face when
            ``attributes.shape[1] == F`` and that many rows cannot be per-vertex (some face uses a
            vertex id ``>= F``); per-vertex otherwise. Pass it when ``V == F`` is ambiguous.

    Returns:
        float ``[B, H, W, K, C]``: per-vertex ``b0 * a0 + b1 * a1 + b2 * a2`` (in that order, as
        the exact shader does) or the per-face value; 0 where ``face_index == -1``. The dtype is
        the promotion of the attributes' and the barycentrics' dtypes.

    Raises:
        PyGpuTypeError: a non-tensor, an integer ``attributes`` or a non-integer ``faces``.
        PyGpuValueError: bad shapes, non-finite attributes, out-of-range faces, mixed devices.
    """
    where = "interpolate"
    if not isinstance(fragments, Fragments):
        raise PyGpuTypeError(f"{where}: `fragments` must be a Fragments, got {type(fragments).__name__}")
    check_tensor(where, "attributes", attributes)
    check_tensor(where, "faces", faces)
    check_float(where, "attributes", attributes)
    if kind not in _KINDS:
        raise PyGpuValueError(f"{where}: `kind` must be 'vertex', 'face' or None, got {kind!r}")
    face_index = fragments.face_index  # int64 [B, H, W, K]
    bary = fragments.bary  # float [B, H, W, K, 3]
    device = face_index.device
    for name, t in (("attributes", attributes), ("faces", faces), ("fragments.bary", bary)):
        if t.device != device:
            raise PyGpuValueError(
                f"{where}: `{name}` is on {t.device} but `fragments.face_index` is on {device}; "
                "move every tensor to one device"
            )
    if faces.dtype in (torch.int32, torch.int16, torch.uint8, torch.int8):
        faces = faces.long()
    if faces.dtype != torch.int64:
        raise PyGpuTypeError(f"{where}: `faces` must be an int64 (or int32) tensor, got {faces.dtype}")
    check_shape(where, "faces", faces, (None, 3), "[F, 3]")
    if attributes.dim() == 2:
        attributes = attributes.unsqueeze(0)
    check_shape(where, "attributes", attributes, (None, None, None), "[B, V, C] or [B, F, C]")
    check_finite(where, "attributes", attributes)
    B, H, W, K = face_index.shape
    if attributes.shape[0] not in (1, B):
        raise PyGpuValueError(
            f"{where}: `attributes` has batch size {attributes.shape[0]} but the fragments have {B}"
        )
    attributes = attributes.expand(B, -1, -1)
    n, C = attributes.shape[1], attributes.shape[2]
    F = faces.shape[0]
    if F and checks_enabled() and int(faces.min()) < 0:
        raise PyGpuValueError(f"{where}: `faces` has a negative vertex id ({int(faces.min())}); ids are 0..V-1")
    checked = checks_enabled()
    max_vertex = int(faces.max()) if F and (checked or kind is None) else -1
    if kind is None:
        kind = "face" if (n == F and max_vertex >= n) else "vertex"
    if kind == "vertex" and n <= max_vertex:
        raise PyGpuValueError(
            f"{where}: per-vertex `attributes` has {n} rows but `faces` uses vertex id {max_vertex} "
            f"(per-face attributes need exactly F={F} rows)"
        )
    if kind == "face" and n != F:
        raise PyGpuValueError(f"{where}: per-face `attributes` must have F={F} rows, got {n}")
    if checked and face_index.numel() and int(face_index.max()) >= F:
        raise PyGpuValueError(
            f"{where}: `fragments.face_index` refers to face {int(face_index.max())} but `faces` has {F}"
        )

    if kind == "face":
        return gather_face(attributes, face_index)
    return interpolate_vertex(attributes, faces, face_index, bary)


def interpolate_vertex(values: torch.Tensor, faces: torch.Tensor, face_index: torch.Tensor,
                       bary: torch.Tensor) -> torch.Tensor:
    """The interpolation kernel every shading path calls (no input checks: callers validate).

    Args:
        values: float ``[B, V, C]`` or ``[1, V, C]`` per-vertex values.
        faces: int64 ``[F, 3]``.
        face_index: int64 ``[B, H, W, K]``, -1 where empty.
        bary: float ``[B, H, W, K, 3]``.

    Returns:
        float ``[B, H, W, K, C]``: ``b0 * a0 + b1 * a1 + b2 * a2``, summed in that order so every
        path gets bit-identical values; 0 where ``face_index == -1``. The dtype is the promotion
        of ``values``' and ``bary``'s.
    """
    B, H, W, K = face_index.shape
    C = values.shape[-1]
    dtype = torch.promote_types(values.dtype, bary.dtype)
    if faces.shape[0] == 0:  # nothing to interpolate: every fragment is empty
        return torch.zeros(B, H, W, K, C, dtype=dtype, device=face_index.device)
    Bv, V = values.shape[:2]
    flat = values.to(dtype).reshape(Bv * V, C)  # one row per vertex (of every element when Bv = B)
    fi = face_index.reshape(-1)
    corner = corner_ids(faces, face_index)
    if Bv > 1:
        offset = (torch.arange(B, device=fi.device) * V)[:, None]
        corner = [(c.view(B, -1) + offset).view(-1) for c in corner]
    planes = weigh_corners(flat.t().contiguous(), corner, bary.to(dtype).reshape(-1, 3).unbind(1), fi >= 0)
    return torch.stack(planes, dim=-1).view(B, H, W, K, C)


def corner_ids(faces: torch.Tensor, face_index: torch.Tensor) -> list[torch.Tensor]:
    """The vertex ids of the faces ``face_index`` (any shape, -1 where empty: face 0's are given
    there), one contiguous int64 ``[N]`` row per corner, gathered from strided columns of
    ``faces`` ``[F, 3]`` without copying it (a strided column of an ``[N, 3]`` gather is slower to
    read, and ``faces.t()`` gathers 3-6x slower)."""
    safe = face_index.reshape(-1).clamp(min=0)
    return [faces[:, j].index_select(0, safe) for j in range(3)]


def weigh_corners(table: torch.Tensor, corner, weights, mask: torch.Tensor | None = None) -> list[torch.Tensor]:
    """Per channel, ``w0 * a0 + w1 * a1 + w2 * a2`` (in that order, as the exact shader does),
    the corners' values ``a_j = table[:, corner[j]]``: one float tensor of the weights' shape per
    channel (0 where ``mask`` is False, when given).

    Args:
        table: float ``[C, V]``, one row of values per channel.
        corner: three int64 ``[N]`` vertex ids, one per corner.
        weights: three float tensors of one shape ``S`` with ``N`` elements, the corners' weights.
        mask: bool of shape ``S``, or None.

    Channel by channel, each one's values are gathered along a contiguous row and weighted
    elementwise (a ``[N, 1] * [N, C]`` broadcast over a short last dim ran about 1.7x slower
    forward + backward); the same products and sums whatever the layout, so the same bits."""
    shape = weights[0].shape
    planes = []
    for row in table:
        at = [row.index_select(0, c).view(shape) for c in corner]
        value = weights[0] * at[0] + weights[1] * at[1] + weights[2] * at[2]
        if mask is not None:
            value = torch.where(mask.view(shape), value, torch.zeros((), dtype=value.dtype, device=value.device))
        planes.append(value)
    return planes


def gather_face(values: torch.Tensor, face_index: torch.Tensor) -> torch.Tensor:
    """Per-face ``[B|1, F, C]`` values at each fragment: ``[B, H, W, K, C]``, 0 where empty."""
    B, H, W, K = face_index.shape
    C = values.shape[-1]
    if values.shape[1] == 0:  # no faces: every fragment is empty
        return torch.zeros(B, H, W, K, C, dtype=values.dtype, device=face_index.device)
    values = values.expand(B, -1, -1)
    safe = face_index.clamp(min=0).reshape(B, -1, 1).expand(-1, -1, C)
    value = torch.gather(values, 1, safe).reshape(B, H, W, K, C)
    return torch.where((face_index >= 0)[..., None], value, torch.zeros((), dtype=values.dtype, device=value.device))
