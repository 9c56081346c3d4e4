"""Rotary position embedding (RoPE): sinusoidal positions applied as rotations of pairs of features.

Used by GlobalPointer's queries and keys (and by RoFormer's attention).
Positions are bert4keras's: `sin`/`cos` of `position * 10000^(-2i/d)`,
interleaved; each feature pair (2i, 2i+1) of a vector is rotated by its angle.
"""

from __future__ import annotations

from keras import ops


def sinusoidal_positions(length, dim: int, dtype="float32"):
    """`[length, dim]`: for position p and i < dim/2, sin then cos of `p * 10000^(-2i/dim)`, interleaved.

    Example:
    >>> [round(float(x), 4) for x in sinusoidal_positions(3, 4)[2]]
    [0.9093, -0.4161, 0.02, 0.9998]
    """
    return sinusoids(ops.arange(length), dim, dtype)


def sinusoids(positions, dim: int, dtype="float32"):
    """`[..., dim]`: the sinusoidal encodings of any positions (e.g. each row's next position).

    Example:
    >>> [round(float(x), 4) for x in sinusoids(ops.convert_to_tensor([[2]]), 4)[0, 0]]
    [0.9093, -0.4161, 0.02, 0.9998]
    """
    positions = ops.cast(positions, dtype)
    frequencies = ops.power(10000.0, -2 * ops.cast(ops.arange(dim // 2), dtype) / dim)
    angles = positions[..., None] * ops.cast(frequencies, dtype)
    return ops.reshape(ops.stack([ops.sin(angles), ops.cos(angles)], axis=-1), (*ops.shape(positions), dim))


def apply_rotary(x, positions):
    """Rotates each feature pair of `x` `[batch, length, ..., dim]` by its position's angles.

    `positions` is `sinusoidal_positions(length, dim)` `[length, dim]`, the
    same for every example, or `[batch, length, dim]`, each example's own.
    """
    if len(positions.shape) == 2:
        positions = positions[None]
    extra = len(x.shape) - 3  # axes between length and features (e.g. heads)
    shape = tuple(ops.shape(positions)[:2]) + (1,) * extra + (positions.shape[-1],)
    cos = ops.reshape(ops.repeat(positions[..., 1::2], 2, axis=-1), shape)
    sin = ops.reshape(ops.repeat(positions[..., ::2], 2, axis=-1), shape)
    rotated = ops.reshape(ops.stack([-x[..., 1::2], x[..., ::2]], axis=-1), ops.shape(x))
    return x * cos + rotated * sin
