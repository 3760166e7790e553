"""TPU slice names: the Cloud accelerator type a user rents and the topology libtpu compiles for.

`v4-64` (Cloud: generation and TensorCores, or chips from v5e on) is `v4:2x4x4` (libtpu:
chips along each axis). Either form names a `Slice`, which knows both, the chip count and
the hosts. The shapes follow Cloud TPU's tables: each doubling of chips doubles the smallest
axis (the last of equal ones), so v4-64 is 2x4x4 and v4-128 is 4x4x4.
"""

import dataclasses
import math
import re

from xlnet_jax.errors import ConfigError


@dataclasses.dataclass(frozen=True)
class Generation:
    """How Cloud and libtpu name one TPU generation, and how its slices are built."""

    cloud: str  # the accelerator type's prefix: v4 in v4-64
    libtpu: str  # the topology's prefix: v4 in v4:2x4x4
    axes: int  # 2 (a torus) or 3
    cores_in_name: int  # what the Cloud number counts per chip: 2 (TensorCores) or 1 (chips)
    chips_per_host: int  # in a multi-host slice
    single_host_chips: int  # the most chips a one-host slice has
    max_chips: int


GENERATIONS = (
    Generation("v2", "v2", 2, 2, 4, 4, 256),
    Generation("v3", "v3", 2, 2, 4, 4, 1024),
    Generation("v4", "v4", 3, 2, 4, 4, 4096),
    Generation("v5litepod", "v5e", 2, 1, 4, 8, 256),
    Generation("v5p", "v5p", 3, 2, 4, 4, 8192),
    Generation("v6e", "v6e", 2, 1, 4, 8, 256),
)
_BY_CLOUD = {g.cloud: g for g in GENERATIONS} | {"v5e": GENERATIONS[3]}  # v5e-8 = v5litepod-8
_BY_LIBTPU = {g.libtpu: g for g in GENERATIONS}
FORMS = (
    "a Cloud accelerator type (v2-8, v3-32, v4-64, v5litepod-16, v5p-128, v6e-64) or a "
    "libtpu topology (v3:4x4, v4:2x4x4, v5e:4x4, v5p:2x2x2, v6e:8x8)"
)


@dataclasses.dataclass(frozen=True)
class Slice:
    """One TPU slice, by both its names."""

    generation: Generation
    dims: tuple[int, ...]  # chips along each axis

    @property
    def chips(self) -> int:
        return math.prod(self.dims)

    @property
    def topology(self) -> str:
        return f"{self.generation.libtpu}:{'x'.join(map(str, self.dims))}"

    @property
    def accelerator_type(self) -> str:
        return f"{self.generation.cloud}-{self.chips * self.generation.cores_in_name}"

    @property
    def chips_per_host(self) -> int:
        g = self.generation
        return self.chips if self.chips <= g.single_host_chips else g.chips_per_host

    @property
    def hosts(self) -> int:
        return self.chips // self.chips_per_host

    def describe(self) -> str:
        """Both names, hosts and chips per host, as a report's first words."""
        return (
            f"{self.accelerator_type} (libtpu topology {self.topology}): {self.chips} chips, "
            f"{self.hosts} host{'s' * (self.hosts > 1)} x {self.chips_per_host} chips"
        )


def standard_dims(generation: Generation, chips: int) -> tuple[int, ...] | None:
    """The shape Cloud gives a slice of `chips` chips, or None if it offers none: 4 chips
    times a power of two (and 1 chip for v5e and v6e), up to the generation's largest."""
    single_chip = chips == 1 and generation.single_host_chips == 8
    if not (single_chip or (chips >= 4 and chips & (chips - 1) == 0)):
        return None
    if chips > generation.max_chips:
        return None
    dims = [1] * generation.axes if single_chip else [2, 2, 1][: generation.axes]
    while math.prod(dims) < chips:
        smallest = min(dims)
        dims[max(i for i, d in enumerate(dims) if d == smallest)] *= 2
        if min(dims) > 1:
            dims.sort()
    return tuple(dims)


def known_generation(name: str) -> bool:
    """Whether `name` starts with a generation of the table, in either form."""
    prefix = re.split(r"[-:]", name, maxsplit=1)[0]
    return prefix in _BY_CLOUD or prefix in _BY_LIBTPU


def parse_slice(name: str) -> Slice:
    """A `Slice` from either form; anything else is one line listing the forms."""
    cloud = re.fullmatch(r"([a-z0-9]+)-(\d+)", name)
    if cloud and cloud.group(1) in _BY_CLOUD:
        generation = _BY_CLOUD[cloud.group(1)]
        count = int(cloud.group(2))
        chips, rest = divmod(count, generation.cores_in_name)
        dims = standard_dims(generation, chips) if not rest and chips else None
        if dims is None:
            unit = "TensorCores" if generation.cores_in_name > 1 else "chips"
            raise ConfigError(
                f"{name!r}: Cloud offers no {generation.cloud} slice of {count} {unit} "
                f"(4 chips times a power of two, up to {generation.max_chips} chips); give "
                f"{FORMS}."
            )
        return Slice(generation, dims)
    topology = re.fullmatch(r"([a-z0-9]+):(\d+(?:x\d+)+)", name)
    if topology and topology.group(1) in _BY_LIBTPU:
        generation = _BY_LIBTPU[topology.group(1)]
        dims = tuple(int(d) for d in topology.group(2).split("x"))
        if len(dims) != generation.axes or 0 in dims:
            raise ConfigError(
                f"{name!r}: a {generation.libtpu} topology has {generation.axes} axes, such as "
                f"{Slice(generation, standard_dims(generation, 16)).topology}."
            )
        return Slice(generation, dims)
    raise ConfigError(f"{name!r} is not a TPU slice: give {FORMS}.")
