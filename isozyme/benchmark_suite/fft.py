"""Enzyme's FFT benchmark: an in-place radix-2 FFT and inverse FFT over interleaved complex doubles.

Facts from Enzyme (EnzymeAD/Enzyme, enzyme/benchmarks/ReverseMode/fft/fft.h and fft.cpp, after Tim
Molteno's and V. Myrnyy's C++ FFT): `data` holds n complex numbers as 2n doubles (re, im, re, im, ...);
`scramble` is the bit-reversal permutation (a 1-based index j walked with a while loop), `recursiveApply`
the Danielson-Lanczos butterflies, the twiddle factor w advanced by the recurrence
w <- w (1 + wpr) + i w wpi with wtemp = sign sin(pi / N), wpi = -sign sin(2 (pi / N)), wpr = -2 wtemp^2;
`ifft` also rescales by 1 / n. The benchmark `foobar` runs `fft` then `ifft` in place and is differentiated
with the output's cotangent seeded (Enzyme seeds ones; here seeded random weights: the gradient of a
weighted sum of the outputs).

The kernel language has no recursion: `butterflies` runs the same butterflies level by level (blocks of 2,
4, ..., n points), each block with its own twiddle recurrence, which is the same arithmetic on every element
as the recursive version (blocks of one level are independent).
"""

from __future__ import annotations

import math

import numpy as np

import isozyme as iz
from isozyme import Array, f64, i64
from isozyme.benchmark_suite import Benchmark, Primal

PI = math.pi


@iz.kernel
def scramble(data: Array[f64], n: i64):
    j = 1
    for ii in range(n):
        i = 2 * ii + 1
        if j > i:
            tmp = data[j - 1]
            data[j - 1] = data[i - 1]
            data[i - 1] = tmp
            tmp = data[j]
            data[j] = data[i]
            data[i] = tmp
        m = n
        while m >= 2 and j > m:
            j -= m
            m = m // 2
        j += m


@iz.kernel
def butterflies(data: Array[f64], n: i64, sign: f64):
    levels = 0
    size = 1
    while size < n:
        size *= 2
        levels += 1
    for level in range(1, levels + 1):
        points = 1 << level  # complex points per block at this level
        for block in range(0, n, points):
            wtemp = sign * iz.sin(PI / points)
            wpi = -sign * iz.sin(2.0 * (PI / points))
            wpr = -2.0 * wtemp * wtemp
            wr = 1.0
            wi = 0.0
            for ii in range(points // 2):
                i = 2 * block + 2 * ii
                iN = i + points
                tempr = data[iN] * wr - data[iN + 1] * wi
                tempi = data[iN] * wi + data[iN + 1] * wr
                data[iN] = data[i] - tempr
                data[iN + 1] = data[i + 1] - tempi
                data[i] += tempr
                data[i + 1] += tempi
                wtemp = wr
                wr = wr * (wpr + 1.0) - wi * wpi
                wi = wi * (wpr + 1.0) + wtemp * wpi


@iz.kernel
def rescale(data: Array[f64], n: i64):
    scale = 1.0 / n
    for i in range(2 * n):
        data[i] *= scale


@iz.kernel
def fft(data: Array[f64], n: i64):
    scramble(data, n)
    butterflies(data, n, 1.0)


@iz.kernel
def ifft(data: Array[f64], n: i64):
    scramble(data, n)
    butterflies(data, n, -1.0)
    rescale(data, n)


@iz.kernel
def fft_roundtrip(data: Array[f64], n: i64):
    # Enzyme's foobar
    fft(data, n)
    ifft(data, n)


def make_args(n: int, seed: int = 0) -> tuple:
    """(data, n): n complex numbers, real and imaginary parts standard normal."""
    assert n > 0 and n & (n - 1) == 0, "n must be a power of 2"
    return np.random.default_rng(seed).standard_normal(2 * n), n


def seeds(args: tuple) -> dict[int, np.ndarray]:
    return {0: np.random.default_rng(7 + args[1]).uniform(-1.0, 1.0, 2 * args[1])}


def _complex(data: np.ndarray) -> np.ndarray:
    return data[0::2] + 1j * data[1::2]


def _interleaved(z: np.ndarray) -> np.ndarray:
    return np.stack([z.real, z.imag], axis=1).ravel()


def fft_numpy(data: np.ndarray, n: int) -> Primal:
    """What `fft` leaves in `data`: numpy's forward FFT (exp(-2 pi i jk / n))."""
    return Primal(None, {0: _interleaved(np.fft.fft(_complex(data)))})


def roundtrip_numpy(data: np.ndarray, n: int) -> Primal:
    return Primal(None, {0: _interleaved(np.fft.ifft(np.fft.fft(_complex(data))))})


BENCHMARK = Benchmark(
    name="fft",
    kernel=fft_roundtrip,
    activity=("dup", "const"),
    sizes={"quick": ({"n": 1024}, {"n": 16384}), "full": tuple({"n": 2**k} for k in (10, 12, 14, 16, 18, 20))},
    make_args=make_args,
    reference=roundtrip_numpy,
    seeds=seeds,
    label=lambda size: f"n={size['n']}",
    scale=lambda size: size["n"],
    description="Enzyme's FFT: in-place radix-2 fft then ifft, weighted sum of the outputs",
)
