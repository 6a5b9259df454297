"""The contract between the engine (``snow_addon``) and the kernel builds.

Three builds implement the same stages: ``kernels.reference`` (NumPy, the test oracle),
``kernels.cpu`` (Numba) and ``kernels.gpu`` (CUDA through CuPy). This module is the one
place that says what a build provides and what the builds and the engine share:

* the shared constants (random streams, flag bits, inflow modes, buffer layouts, the
  solver's scalar slots ...): every build and the engine import them from here, and the
  CUDA sources get them as ``#define`` lines made by ``cuda_defines``;
* small immutable parameter records (named tuples: ``FlakeState``, ``WindField``,
  ``Ground``, ``FlakeLaw``, ``BlowingSnow``, ``Inflow``) that the flakes' kernels take
  instead of 49 loose arguments;
* one ``Protocol`` per stage (``STAGES``): the functions, their parameters and what they
  do. ``Backend.kernel_module(stage)`` hands out a build's module of a stage, and
  tests/engine/test_kernel_contract.py checks that every build's module provides every
  member with these parameters (a build may add keyword parameters with defaults).

The engine never imports a build: it gets the modules from its ``Backend``
(``snow_addon.backend``), host-side helpers on NumPy arrays (the gusts' random keys, the
preview's wind samples) from ``host_kernels``.
"""
from __future__ import annotations

from typing import Any, NamedTuple, Optional, Protocol

import numpy as np

F32 = np.float32

# --- random streams (kernels.reference.rng.random_uniform(seed, index, counter, stream)) -----
#: The counter of a flake's constants (terminal speed, spiral), drawn again every step.
CONSTANT_COUNTER = 0xFFFFFFFF
STREAM_TERMINAL_SPEED, STREAM_RADIUS, STREAM_OMEGA, STREAM_OMEGA_SIGN = 0, 1, 2, 3
STREAM_X, STREAM_Y, STREAM_Z, STREAM_PHASE = 4, 5, 6, 7
STREAM_LIFT, STREAM_LIFT_HEIGHT = 8, 9
STREAM_EDDY_X, STREAM_EDDY_Y, STREAM_EDDY_Z = 10, 11, 12
STREAM_REENTRY = 13
#: A respawning flake enters as a grain of blowing snow across the upwind edge (the draw
#: against the suspension's inflow share, then the height bin it enters at).
STREAM_INJECT, STREAM_INJECT_HEIGHT = 14, 15

# --- flakes -------------------------------------------------------------------------------
#: Bit of ``respawn_count`` set while a flake is a lifted blowing-snow grain (cleared when
#: it settles and respawns); the count itself is the other 31 bits.
BLOWING = np.uint32(0x80000000)
#: A grain that entered across the upwind edge may stand for 2^k grains (k in these bits
#: of ``respawn_count``, 0 otherwise): its landing counts 2^k hits, so the suspension of a
#: strong wind takes at most half of the respawning flakes (snow_addon.suspension).
GRAIN_WEIGHT_SHIFT = 28
GRAIN_WEIGHT_BITS = np.uint32(0x70000000)
MAX_GRAIN_WEIGHT_EXPONENT = 7
#: Bit of ``respawn_count`` set while a grain that entered across the upwind edge is aloft
#: (its snow is booked when it settles; a grain lifted off the terrain is booked with the
#: snowfall, and unbooked if it leaves: kernels.reference.cover.deposit_weight).
FROM_UPWIND = np.uint32(0x08000000)
COUNT_BITS = np.uint32(0x07FFFFFF)
#: Slots of the flakes' int32 ``grain_count`` (GRAIN_COUNT_SLOTS,) a step fills: the grains
#: aloft after it, the grains that landed on the terrain (settled: BLOWING was set at the
#: step's start), the fresh flakes lifted off the terrain on their first touch (BLOWING was
#: clear; the deposit shares the snowfall among the fresh touches, kernels.reference.cover),
#: the grains from upwind (FROM_UPWIND) that settled on the terrain, the grains lifted off
#: the terrain that ended without settling on it (left the domain or landed outside it)
#: (the settled grains weighted as GRAIN_WEIGHT_BITS say). The deposit books the grains
#: from upwind that settled and the lifted ones that left
#: (kernels.reference.cover.deposit_weight).
GRAINS_ALOFT, GRAIN_LANDINGS, FRESH_LIFTS, UPWIND_SETTLES, LIFTED_EXITS = 0, 1, 2, 3, 4
GRAIN_COUNT_SLOTS = 5
#: States saved with the suspension probe hold more slots: 39 (these five at 0, 1, 2, 5, 6)
#: or, before UPWIND_SETTLES and LIFTED_EXITS, 37 (the first three at 0, 1, 2).
PROBE_GRAIN_COUNT_SLOTS, LEGACY_GRAIN_COUNT_SLOTS = 39, 37
#: Bins of whole wind cells above the ground of the entering grains' heights
#: (BlowingSnow.inflow_heights; the last bin takes the rest).
INFLOW_HEIGHT_BINS = 32
#: sqrt(3): a uniform draw on [-sqrt(3), sqrt(3)] has unit variance.
SQRT3 = F32(np.sqrt(3.0))
OMEGA_MIN = F32(np.pi / 4.0)
OMEGA_MAX = F32(np.pi / 3.0)
TWO_PI = F32(2.0 * np.pi)
#: Heights below this mark heightmap nodes without a surface (OPEN_HEIGHT is -1e30).
OPEN_LIMIT = F32(-1.0e29)
#: Initial flakes start at least this fraction of a wind cell above the ground.
SPAWN_MARGIN = F32(0.01)
#: The upwind fetch (settings.upwind_fetch): the flakes' ``Inflow.mode`` and the drift's
#: ``boundary``: the edges across the wind wrap around (WRAP), or they are open, an open
#: snowfield upwind (OPEN_SNOWFIELD) or bare ground (BARE_GROUND).
WRAP, OPEN_SNOWFIELD, BARE_GROUND = 0, 1, 2

# --- wind ---------------------------------------------------------------------------------
#: A face's weight in the advection's samples is min(1, SAMPLE_WEIGHT_SCALE * its open
#: fraction): faces at least half open count fully, a nearly closed one little. The flow
#: squeezing through a small opening is fast, and at full weight the back-traces spread it
#: into the wind (a fence on a wind-cell boundary: 100-160 m/s within 7 s of a 10 m/s
#: storm); weighted by the fraction alone, the hemisphere's crest slowed from 1.37 to
#: 1.30 U between its first and second flow-through (docs/wind_solver.md).
SAMPLE_WEIGHT_SCALE = F32(2.0)
#: Bits of ``inflow_sides``: the domain sides whose faces take the inflow wind.
INFLOW_X_MINUS, INFLOW_X_PLUS, INFLOW_Y_MINUS, INFLOW_Y_PLUS = 1, 2, 4, 8
#: Points per face edge at which face_fractions samples the terrain.
FRACTION_SAMPLES = 8
#: Open fractions below FRACTION_LOW are 0 and above FRACTION_HIGH are 1 (float32 rounding
#: of a flat ground that lies on a face level must give exactly closed and open faces).
FRACTION_LOW = F32(1e-4)
FRACTION_HIGH = F32(F32(1.0) - F32(1e-4))
#: Open fractions are multiples of FRACTION_STEP = 1/128 (rounded to the nearest): the
#: pressure's finest level then stores them as uint8 exactly (COEFFICIENT_STEPS), a quarter
#: of float32's traffic in its bandwidth-bound smoother.
FRACTION_STEPS = 128
FRACTION_STEP = F32(1.0 / FRACTION_STEPS)
#: The smallest open fraction a face keeps (3/128 = 0.023): slivers the terrain nearly
#: closes count as this open. Without it the pressure's multigrid slows on rolling terrain
#: (64 x 64 x 16 cells: 15 CG iterations instead of 7, growing with the grid); 0.02 kept 8
#: at 32 and 64 cells and cost the half-cylinder's crest 1.2% (0.05: 7 iterations, 3.7%;
#: closing the slivers instead: 13%).
FRACTION_MIN = F32(3.0 / FRACTION_STEPS)
#: "No thin obstacle in this column" in the block tops of face_fractions.
NO_BLOCK = F32(-3.0e38)


def inflow_sides_of(vx, vy, walls: bool = False) -> int:
    """The prescribed sides of a wind (vx, vy) m/s: x- when vx > 0, x+ when vx < 0, y- when
    vy > 0, y+ when vy < 0 (float32 comparisons, as the kernels see the values). With
    ``walls``, also both sides of an axis the wind runs parallel to (vx == 0: both x
    sides), a closed free-slip pair, unless there is no wind at all: otherwise those sides
    are outflow sides at p = 0, which draw the raised pressure in front of an obstacle that
    spans the domain out sideways."""
    vx, vy = F32(vx), F32(vy)
    closed = walls and not (vx == 0 and vy == 0)
    x_sides = INFLOW_X_MINUS | INFLOW_X_PLUS if closed and vx == 0 else 0
    y_sides = INFLOW_Y_MINUS | INFLOW_Y_PLUS if closed and vy == 0 else 0
    return ((INFLOW_X_MINUS if vx > 0 else 0) | (INFLOW_X_PLUS if vx < 0 else 0)
            | (INFLOW_Y_MINUS if vy > 0 else 0) | (INFLOW_Y_PLUS if vy < 0 else 0)
            | x_sides | y_sides)


# --- pressure -----------------------------------------------------------------------------
#: The finest level stores its face coefficients as uint8 q = 128 A_f (the open fractions
#: are multiples of 1/128, FRACTION_STEP): a quarter of float32's traffic in the smoother,
#: and the same values: q * (1/128) is exact.
COEFFICIENT_STEPS = 128
COEFFICIENT_STEP = F32(1.0 / COEFFICIENT_STEPS)
#: wind.WindSolver runs the levels with at most this many cells (below the finest) through
#: coarse_vcycle (the GPU build does them in one launch; the others the same sequence).
COARSE_VCYCLE_CELLS = 4096
#: Slots of the CG scalar array (float64, on the backend): the CG's dot products ...
RZ, DQ, RR, RZ_NEXT, BB = 0, 1, 2, 3, 4
#: ... the wind step's diagnostics: max |rhs| before the solve, max |div u| after ...
DIVERGENCE_BEFORE, DIVERGENCE_AFTER = 5, 6
#: ... and the solve's state on the device (cg_begin, cg_check): DONE (1 once it stopped:
#: the iterations queued after that change nothing), the iterations counted and the
#: relative residual of the last one counted.
DONE, ITERATIONS, RELATIVE = 7, 8, 9
SCALAR_SLOTS = 10

# --- snow cover ---------------------------------------------------------------------------
#: The theses' 5x5 deposit footprint (centre 0.15, edge 0.095, diagonal 0.059, two away
#: on the axes 0.026, knight moves 0.015, corners 0.0037); normalised per hit node.
FOOTPRINT = np.array([
    [0.0037, 0.015, 0.026, 0.015, 0.0037],
    [0.015, 0.059, 0.095, 0.059, 0.015],
    [0.026, 0.095, 0.15, 0.095, 0.026],
    [0.015, 0.059, 0.095, 0.059, 0.015],
    [0.0037, 0.015, 0.026, 0.015, 0.0037]], dtype=np.float32)
FOOTPRINT.flags.writeable = False
#: Landings deposit in multiples of 1/WEIGHT_UNITS of ``volume_per_hit`` (exact integer books).
WEIGHT_UNITS = 4096
#: A landing deposits at most this many units (16 hits' worth): a step with few landings
#: leaves the rest of the sky's snow owed to the next ones instead of piling it on one node.
MAX_LANDING_UNITS = 16 * WEIGHT_UNITS

# --- drift --------------------------------------------------------------------------------
#: Threads of the wrap's reduction (``edge_sum``): each sums a strided slice of the edge,
#: then a pairwise tree adds the partial sums (the same order in every backend).
WRAP_THREADS = 256
#: Crosswind samples of the wake window in ``separation_bubble``.
WAKE_SAMPLES = 7
#: Surface height of a column with no surface node (the heightmap's open height).
NO_SURFACE = F32(-1.0e30)
#: |component| of the unit crosswind vector from which a grid step takes it (sin 22.5
#: degrees: the nearest of the eight grid directions).
GRID_STEP_FROM = F32(0.38268343)


def wrap_buffer_size(shape) -> int:
    """Length of ``drift_transport``'s float32 ``wrap`` buffer for a heightmap of ``shape``
    (ny, nx): [0], [1] the shares (m), [2] the GPU's count of finished blocks (uint32 bits,
    0 between launches), [3:] the wrap faces' transfers, or with an open boundary the first
    and then the last edge's boundary faces (the GPU's scratch)."""
    return 3 + 2 * max(int(shape[0]), int(shape[1]))


# --- heightmap ----------------------------------------------------------------------------
#: A node belongs to a triangle when each of its barycentric coordinates is >= -this:
#: edges are inclusive with a little slack, so a node on an edge shared by two triangles is
#: never lost to rounding (no cracks), while a node outside gains at most 1e-7 of the
#: triangle's height of extrapolation.
BARYCENTRIC_TOLERANCE = 1e-7
#: Node-index padding of a triangle's bounding box, so nodes that lie exactly on a
#: bounding edge reach the barycentric test despite rounding in the index arithmetic.
INDEX_PADDING = 1e-6
#: A triangle whose twice-signed XY area is at most this times the square of its XY bounding
#: box is seen edge-on from above (vertical): it covers no node and is skipped.
EDGE_ON_TOLERANCE = 1e-12


# --- CUDA ---------------------------------------------------------------------------------
def c_literal(value) -> str:
    """``value`` as an exact C literal: float32 as a hexadecimal float (``0x1.8p+1f``),
    uint32 with a ``u`` suffix, int64 with ``LL``, other integers as they are."""
    if isinstance(value, (np.floating, float)):
        return float(np.float32(value)).hex() + "f"
    if isinstance(value, np.unsignedinteger):
        return f"{int(value):#x}u"
    if isinstance(value, np.int64):
        return f"{int(value)}LL"
    if isinstance(value, (int, np.integer)) and not isinstance(value, bool):
        return str(int(value))
    raise TypeError(f"no C literal for {value!r}")


def cuda_defines(**values) -> str:
    """``#define NAME literal`` lines (``c_literal``) for a CUDA source's shared constants:
    ``cuda_defines(OPEN_LIMIT=OPEN_LIMIT, STREAM_X=np.uint32(STREAM_X))``."""
    return "".join(f"#define {name} {c_literal(value)}\n" for name, value in values.items())


# --- parameter records of the flakes' kernels --------------------------------------------
class FlakeState(NamedTuple):
    """Every flake's state, struct of arrays of shape (N,), updated in place: uint32
    ``flake_id`` (the flake stored at each index), float32 positions (m), velocities (m/s)
    and spiral ``phase`` (rad), uint32 ``respawn_count`` (BLOWING bit + GRAIN_WEIGHT_BITS +
    FROM_UPWIND + COUNT_BITS)."""
    flake_id: Any
    pos_x: Any
    pos_y: Any
    pos_z: Any
    vel_x: Any
    vel_y: Any
    vel_z: Any
    phase: Any
    respawn_count: Any



class WindField(NamedTuple):
    """The wind on the MAC grid: float32 face velocities (m/s) ``u`` (nz, ny, nx+1),
    ``v`` (nz, ny+1, nx), ``w`` (nz+1, ny, nx); the grid's min corner (m) and cubic cells
    of ``cell_size`` m."""
    u: Any
    v: Any
    w: Any
    x0: float
    y0: float
    z0: float
    cell_size: float



class Ground(NamedTuple):
    """The ground the flakes land on: float32 (ny, nx) terrain ``height`` and
    ``snow_depth`` (m) on the heightmap's nodes, origin (``x0``, ``y0``) m, node
    ``spacing`` m."""
    height: Any
    snow_depth: Any
    x0: float
    y0: float
    spacing: float



class FlakeLaw(NamedTuple):
    """What every flake of a bake obeys: the random ``seed`` (uint32), terminal speeds
    drawn in [``vt_min``, ``vt_max``] m/s, spiral radius up to ``spiral_radius`` m,
    ``gravity`` m/s^2."""
    seed: int
    vt_min: float
    vt_max: float
    spiral_radius: float
    gravity: float = 9.81


class BlowingSnow(NamedTuple):
    """Blowing snow and the surface layer's eddies (made by snow_addon.drift.SnowDrift;
    the rules: kernels.reference.flakes). ``surface_x``, ``surface_y``: float32 (ny, nx)
    surface wind (m/s) on the wind grid's columns (None: no lift and no eddies; grains
    aloft still fall at ``grain_speed``); ``ustar_per_speed``: u* per m/s of it;
    a landing flake is lifted again where u* > ``threshold`` (m/s) and the wind blows along
    (``heading_x``, ``heading_y``), with probability ``lift_strength`` * (1 - u*_t^2/u*^2),
    and falls at ``grain_speed`` m/s while aloft; ``step_index`` counts the simulation's
    steps (the lift's and the eddies' random counter); ``bubble_top`` (float32 (ny, nx) m or
    None): still air below it; eddies of ``eddy_scale`` (von Karman's constant, 0: none)
    with mixing length up to ``mixing_height`` m, nodes ``eddy_steps`` steps apart, u* at
    least ``eddy_floor`` m/s. With an open snowfield upwind, each respawning flake enters
    across the upwind edge as a grain with chance ``inflow_share`` standing for
    2^``inflow_exponent`` grains, at a height drawn from ``inflow_heights`` (int32
    (INFLOW_HEIGHT_BINS,) on the device, whole wind cells above the ground): the open
    snowfield's equilibrium suspension (snow_addon.suspension; 0: none enter)."""
    surface_x: Optional[Any] = None
    surface_y: Optional[Any] = None
    ustar_per_speed: float = 0.0
    threshold: float = 0.0
    heading_x: float = 1.0
    heading_y: float = 0.0
    lift_strength: float = 0.0
    step_index: int = 0
    bubble_top: Optional[Any] = None
    eddy_scale: float = 0.0
    mixing_height: float = 10.0
    eddy_steps: int = 24
    grain_speed: float = 0.0
    eddy_floor: float = 0.0
    inflow_share: float = 0.0
    inflow_exponent: int = 0
    inflow_heights: Optional[Any] = None


class Inflow(NamedTuple):
    """Where the flakes come from along the wind (settings.upwind_fetch): ``mode`` WRAP
    (they wrap around the domain) or OPEN_SNOWFIELD / BARE_GROUND (an open landscape: a
    flake respawns above a landing target spread ``margin`` m beyond both ends along the
    wind, moved upwind by its fall to the ground there (m) times (``wind_x``, ``wind_y``) /
    its terminal speed; ``wind_*`` the wind before gusts, m/s)."""
    mode: int = WRAP
    wind_x: float = 0.0
    wind_y: float = 0.0
    margin: float = 0.0


#: The flakes wrap around the domain (no open upwind fetch).
NO_INFLOW = Inflow()


def flat_initialize_arguments(state: FlakeState, wind: WindField, ground: Ground,
                              law: FlakeLaw, inflow: Inflow = NO_INFLOW) -> tuple:
    """(positional, keyword) arguments of a build's flat ``initialize_flakes`` body: the
    records unpacked in one place for every build."""
    return ((*state, *wind, *ground, law.seed, law.vt_min, law.vt_max, law.spiral_radius),
            _inflow_keywords(inflow))


def flat_step_arguments(state: FlakeState, wind: WindField, ground: Ground, law: FlakeLaw,
                        dt, hit_counts, blowing: Optional[BlowingSnow] = None,
                        inflow: Inflow = NO_INFLOW, grain_count=None) -> tuple:
    """(positional, keyword) arguments of a build's flat ``step_flakes`` body."""
    keywords = _inflow_keywords(inflow)
    if blowing is not None:
        keywords.update(blowing._asdict())     # the fields are the bodies' keyword names
    if grain_count is not None:
        keywords["grain_count"] = grain_count
    return ((*state, *wind, *ground, hit_counts, *law, dt), keywords)


def _inflow_keywords(inflow: Inflow) -> dict:
    if inflow.mode == WRAP:
        return {}
    return {"inflow_mode": inflow.mode, "inflow_x": inflow.wind_x, "inflow_y": inflow.wind_y,
            "margin": inflow.margin}


def flake_kernels(initialize_flat, step_flat) -> tuple:
    """(initialize_flakes, step_flakes) taking the records (FlakesKernels) for a build whose
    bodies ``initialize_flat`` and ``step_flat`` take the arguments flat: every build gets
    its two entry points here, so the records are unpacked the same way for all."""
    def initialize_flakes(state: FlakeState, wind: WindField, ground: Ground, law: FlakeLaw,
                          inflow: Inflow = NO_INFLOW):
        arguments, keywords = flat_initialize_arguments(state, wind, ground, law, inflow)
        initialize_flat(*arguments, **keywords)

    def step_flakes(state: FlakeState, wind: WindField, ground: Ground, law: FlakeLaw, dt,
                    hit_counts, blowing: Optional[BlowingSnow] = None,
                    inflow: Inflow = NO_INFLOW, grain_count=None):
        arguments, keywords = flat_step_arguments(state, wind, ground, law, dt, hit_counts,
                                                  blowing, inflow, grain_count)
        step_flat(*arguments, **keywords)

    module = initialize_flat.__module__
    for function, flat in ((initialize_flakes, initialize_flat), (step_flakes, step_flat)):
        function.__module__ = module
        function.__doc__ = (f"FlakesKernels.{function.__name__} (kernels.contract): the "
                            f"records unpacked for ``{flat.__name__}``.")
    return initialize_flakes, step_flakes


# --- the stages ---------------------------------------------------------------------------
class FlakesKernels(Protocol):
    """The flakes stage (kernels.<build>.flakes; the model: kernels.reference.flakes)."""

    #: Steps between spatial sorts of the flake arrays (0: this build does not sort).
    SORT_INTERVAL: int

    def initialize_flakes(self, state: FlakeState, wind: WindField, ground: Ground,
                          law: FlakeLaw, inflow: Inflow = NO_INFLOW):
        """Place every flake (counter 0): XY uniform over the wind domain (with an open
        ``inflow``: over its landing targets, moved upwind), z uniform between the ground
        and the top, velocity = local wind + (0, 0, -Vt)."""

    def step_flakes(self, state: FlakeState, wind: WindField, ground: Ground, law: FlakeLaw,
                    dt, hit_counts, blowing: Optional[BlowingSnow] = None,
                    inflow: Inflow = NO_INFLOW, grain_count=None):
        """One step of ``dt`` s of every flake: drag, gravity, spiral, wrap or open inflow,
        collisions (+1 in int32 ``hit_counts`` (ny, nx) per landing), respawns; with
        ``blowing``, lifts and eddies, and int32 ``grain_count`` (GRAIN_COUNT_SLOTS,) gains
        the grains aloft, the grains settled on the terrain and the fresh flakes lifted off
        it."""

    def grain_flights(self, speed, ustar, cell_size, column, dt, eddy_scale, mixing_height,
                      eddy_steps, grain_speed, gravity, steps, travelled, crossings):
        """The flights (at most ``steps`` of ``dt`` s) of len(``travelled``) grains lifted
        over level open ground in a uniform wind of ``speed`` m/s (the open snowfield's
        suspension, snow_addon.suspension): writes the metres each grain travelled
        downwind into float64 ``travelled`` (samples,) and the same split by the whole cell
        of its height into float64 ``crossings`` (samples, INFLOW_HEIGHT_BINS)."""

    def cell_keys(self, pos_x, pos_y, pos_z, wx0, wy0, wz0, cell_size, nx, ny, nz, keys):
        """Linear wind-cell index (k * ny + j) * nx + i of each flake (clamped), into uint32
        keys."""

    def sort_permutation(self, keys, cell_counts, destination):
        """Destination index of each flake so that keys end up ascending."""

    def scatter(self, source, destination, out):
        """out[destination[n]] = source[n] for 4-byte words (uint32 views of any state
        array)."""


class HeightmapKernels(Protocol):
    """The heightmap stage (kernels.<build>.heightmap; each kernel's arrays, units and
    rules: kernels.reference.heightmap)."""

    def rasterize_top_surface(self, vertices, triangles, x0, y0, spacing, height_out,
                              has_surface_out):
        """Top-most surface height seen from the sky at every heightmap node."""

    def vertex_snow_depth(self, height, has_surface, snow_depth, x0, y0, spacing, vertices,
                          tolerance, depth_out):
        """Snow depth (m) at each vertex on the top-most surface, 0 under an overhang."""


class WindKernels(Protocol):
    """The wind stage (kernels.<build>.wind; each kernel's arrays, units and
    rules: kernels.reference.wind)."""

    def voxel_fractions(self, solid, frac_u, frac_v, frac_w):
        """Open fractions of a solid-cell mask (uint8 (nz, ny, nx)): 1 where no solid cell
        touches a face, else 0 (the "voxels" wind boundary)."""

    def open_blocks(self, fractions, out):
        """out[k, j, i] (uint8, the cell shape (nz, ny, nx)): bit C (1 u, 2 v, 4 w) set when
        every face of component C in the 2 x 2 x 2 block whose lowest face index is (k, j, i)
        has the full sample weight, A_f >= 1 / SAMPLE_WEIGHT_SCALE (faces past the end of the
        face array left out)."""

    def solid_from_heightmap(self, height, snow_depth, hx0, hy0, spacing, x0, y0, z0, cell_size,
                             solid, column_top=None):
        """solid[k, j, i] = 1 where the cell centre lies below the bilinear height + snow depth
        (heightmap arrays (ny_h, nx_h) float32 m, origin (hx0, hy0), node spacing m) sampled at
        the centre's XY; wind grid min corner (x0, y0, z0) m, cubic cells of ``cell_size`` m."""

    def obstacle_surface(self, height, snow_depth, hx0, hy0, spacing, x0, y0, cell_size,
                         column_top, out):
        """out (ny, nx) float32 m: the surface the wind's solid mask stands on in each column
        (solid_from_heightmap's rule): the bilinear height + snow depth at the column's centre,
        or ``column_top`` (the highest surface inside the column,
        kernels.reference.drift.column_surface) where that is a thin obstacle or where the
        centre's ground mixes in open nodes (at most OPEN_LIMIT)."""

    def block_tops(self, height, snow_depth, hx0, hy0, spacing, x0, y0, cell_size, column_top,
                   out):
        """out (ny, nx) float32 m: ``column_top`` in the columns of a thin obstacle (the rule
        of solid_from_heightmap), NO_BLOCK elsewhere; face_fractions fills those columns up to
        it, as the voxel mask does."""

    def face_fractions(self, height, snow_depth, hx0, hy0, spacing, x0, y0, z0, cell_size, blocks,
                       frac_u, frac_v, frac_w):
        """Open area fraction A_f in [0, 1] of every face (float32 arrays of the face shapes)
        against the terrain surface t(x, y) = max(bilinear height + snow depth, the block top
        of the column the point lies in; a point on a column boundary takes the higher of the
        two): the cut cells of the wind (heightmap and grid arguments as in
        solid_from_heightmap; ``blocks`` (ny, nx) from block_tops, or all NO_BLOCK)."""

    def advect_velocity(self, u, v, w, fractions, inflow_x, inflow_y, inflow_sides, cell_size, dt,
                        u_out, v_out, w_out, blocks=None):
        """Semi-Lagrangian self-advection of each face component over ``dt`` seconds (back-
        trace with the full velocity at the face: the component itself and the trilinear
        (4-face average) other two; trilinear sampling over open faces, clamped at the domain),
        then the boundary conditions for inflow (inflow_x, inflow_y) m/s through
        ``inflow_sides`` (bit mask; see the module's rules)."""

    def correct_advection(self, u, v, w, fractions, inflow_x, inflow_y, inflow_sides, cell_size,
                          dt, u_adv, v_adv, w_adv, u_out, v_out, w_out, blocks=None):
        """MacCormack step after ``advect_velocity`` (Selle et al."""

    def divergence(self, u, v, w, fractions, scale, out):
        """out = scale * (net outflow A_f u_f of each cell's faces) (cells (nz, ny, nx)): the
        velocity of a face is the velocity of its open part; 0 in a cell with no open face."""

    def project(self, u, v, w, pressure, coef_x, coef_y, coef_z, scale):
        """Subtract ``scale`` * pressure difference across each face whose coefficient is not
        0, in place (scale = dt/h for kinematic pressure in m^2/s^2): the full gradient, also
        on a partly open face (its coefficient A_f weights the divergence, not the velocity's
        update)."""

    def eddy_viscosity(self, u, v, w, solid, column_top, z0, cell_size, mixing, mixing_height,
                       limit, out):
        """out (nz, ny, nx) float32 = the eddy viscosity nu (m^2/s) of each cell: l^2 |S| with
        l = mixing * clamp(z - column_top, 0, mixing_height) (z the centre's height, column_top
        (ny, nx) m the column's surface), at most ``limit``; 0 in solid cells (uint8 mask)."""

    def diffuse_velocity(self, u, v, w, fractions, nu, scale, u_out, v_out, w_out):
        """One explicit step of the eddy viscosity's diffusion: each open face not on the
        domain's sides gets scale * nu_f * (the sum over its six neighbour faces along x, y, z
        that exist and are open of their difference to it), nu_f the mean of the two cells the
        face separates, scale = dt / h^2; closed neighbours are left out (free slip at walls,
        zero gradient at the domain's edges)."""

    def porous_drag(self, u, v, w, solid, fence_bottom, fence_top, fence_resistance, z0, cell_size,
                    dt):
        """The porous fences' drag over ``dt`` s, in place: every face inside the domain gets u
        max(0, 1 - dt c_f |u|), c_f the mean of the two cells' fence_drag_cells along the
        face's axis (the two faces of a fence's cell share its drag); ``fence_resistance`` is
        (3, ny, nx), the columns' coefficients along x, y and z."""


class PressureKernels(Protocol):
    """The pressure stage (kernels.<build>.pressure; each kernel's arrays, units and
    rules: kernels.reference.pressure)."""

    def face_coefficients(self, fractions, outflow_x_minus, outflow_x_plus, outflow_y_minus,
                          outflow_y_plus, coef_x, coef_y, coef_z):
        """Fine-level face coefficients from the faces' open fractions A_f (``fractions`` =
        (frac_u, frac_v, frac_w), float32 in [0, 1], see kernels.reference.wind): A_f inside
        the domain and on outflow (Dirichlet) sides, 0 on prescribed (inflow) sides, the bottom
        and the lid."""

    def restrict_coefficients(self, coef_x, coef_y, coef_z, fx, fy, fz, boundary_x, boundary_y,
                              coarse_coef_x, coarse_coef_y, coarse_coef_z):
        """Coarse face coefficient = sum of the fine face coefficients it covers / the
        coarsening factor along its normal (so an open region keeps the geometric value of area
        / distance on the coarse cells; odd ends cover fewer fine faces)."""

    def apply_operator(self, p, coef_x, coef_y, coef_z, out):
        """out = A p (0 in solid cells)."""

    def residual(self, p, b, coef_x, coef_y, coef_z, out):
        """out = b - A p (0 in solid cells)."""

    def jacobi_sweep(self, p, b, coef_x, coef_y, coef_z, omega, out):
        """One damped Jacobi sweep: out = p + omega * (b - A p) / diag (0 in solid cells)."""

    def redblack_sweep(self, p, b, coef_x, coef_y, coef_z, omega, color):
        """Half a red-black SOR sweep in place: cells with (i + j + k) % 2 == color get p +=
        omega * ((b + neighbour sum) / diag - p); solid cells are set to 0."""

    def restrict_residual(self, r, fx, fy, fz, out):
        """out (coarse) = P^T r: each coarse cell gathers the fine cells linked to it."""

    def prolong_add(self, coarse, coef_x, coef_y, coef_z, fx, fy, fz, p):
        """p (fine) += P coarse (trilinear, cell-centred), in fluid cells only."""

    def transfer_scale(self, coarse_coef_x, coarse_coef_y, coarse_coef_z, coef_x, coef_y, coef_z,
                       fx, fy, fz, out):
        """out (fine, float32) = 1 / (sum of the prolongation weights of the fine cell's active
        coarse parents) in active fine cells, 0 elsewhere or when no parent is active."""

    def restrict_scaled_residual(self, r, scale, fx, fy, fz, out):
        """out (coarse) = P^T (scale * r): the transpose of prolong_scaled_add."""

    def prolong_scaled_add(self, coarse, scale, fx, fy, fz, p):
        """p (fine) += scale * (P coarse): trilinear from the active coarse parents only, the
        weights renormalized to sum to 1 (``scale`` from transfer_scale, 0 in inactive cells)."""

    def redblack_pairs(self, p, b, coef_x, coef_y, coef_z, omega, first_color, pairs):
        """``pairs`` red-black SOR sweep pairs in place, colours first, 1 - first, first, ."""

    def redblack_pairs_from_zero(self, p, b, coef_x, coef_y, coef_z, omega, first_color, pairs):
        """p = 0, then ``pairs`` red-black SOR sweep pairs in place (the V-cycle's smoothing of
        a level from a zero guess; the GPU build does the zeroing and the first half-sweep in
        one pass, with the same result)."""

    def coarse_vcycle(self, solutions, rhs, residuals, coefs, factors, smoothing_pairs,
                      coarsest_pairs):
        """The coarse end of a V-cycle over levels l = 0 ."""

    def dot(self, a, b, scalars, slot):
        """scalars[slot] = sum(a * b) accumulated in float64."""

    def max_abs(self, values, scalars, slot):
        """scalars[slot] = max |values| (0 for no values; NaN if any value is NaN)."""

    def extrapolate(self, pressure, previous):
        """Warm start in time: pressure = 2 pressure - previous, previous = the old pressure
        (float32; the doubling is exact)."""

    def apply_operator_dot(self, p, coef_x, coef_y, coef_z, out, scalars, slot):
        """out = A p; scalars[slot] = p ."""

    def residual_norm(self, p, b, coef_x, coef_y, coef_z, out, scalars, slot):
        """out = b - A p; scalars[slot] = b ."""

    def cg_update_norm(self, x, r, d, q, scalars):
        """cg_update, then scalars[RR] = r ."""

    def cg_begin(self, scalars):
        """A new solve: DONE = 0, ITERATIONS = 0."""

    def cg_check(self, scalars, tolerance, limit):
        """After a CG iteration (cg_update_norm), unless the solve is DONE: count it, store its
        relative residual ||r|| / ||b|| in RELATIVE, and set DONE when that is <= tolerance,
        the count reached ``limit`` or b = 0."""

    def cg_update_check(self, x, r, d, q, scalars, tolerance, limit):
        """cg_update_norm, then cg_check: one CG iteration's update and its convergence check."""

    def cg_update(self, x, r, d, q, scalars):
        """alpha = rz / dq (0 unless dq > 0); x += alpha d; r -= alpha q (alpha as float32)."""

    def cg_direction(self, d, z, scalars):
        """beta = rz_next / rz (0 unless rz > 0); d = z + beta d; then rz = rz_next."""

    def capture(self, function):
        """A callable that repeats ``function``'s kernel launches (the GPU build records them
        once as a CUDA graph; here it is the function itself)."""


class CoverKernels(Protocol):
    """The cover stage (kernels.<build>.cover; each kernel's arrays, units and
    rules: kernels.reference.cover)."""

    def deposit_hits(self, hit_counts, scale, has_surface, snow_depth, hit_total, next_hit_counts,
                     weighted_total=None, ledger=None, next_ledger=None, nominal_units=0,
                     next_grain_count=None, landing_kinds=None, suspended_total=None):
        """Gather the footprints of this step's hits into ``snow_depth`` (surface nodes only)
        and zero ``next_hit_counts`` (int32, the buffer the flakes fill next step; must not
        alias ``hit_counts``, which is left as is) and ``next_grain_count`` (int32, when
        given); with ``landing_kinds`` (the step's grain counts) the snowfall's sharers are
        the fresh touches and ``suspended_total`` (int64 (1,)) books the grains' net."""

    def redistribute(self, height, has_surface, snow_depth, threshold, min_depth, fraction,
                     snow_out):
        """One redistribution pass from ``snow_depth`` into ``snow_out`` (both (ny, nx)
        float32, m; must not alias)."""


class DriftKernels(Protocol):
    """The drift stage (kernels.<build>.drift; each kernel's arrays, units and
    rules: kernels.reference.drift)."""

    def surface_wind(self, u, v, w, fractions, wind_x, wind_y, scour=None, approach_speed=0.0,
                     heading_x=1.0, heading_y=0.0):
        """wind_x, wind_y (ny_w, nx_w) float32 m/s: the wind along the surface at each column's
        lowest open cell (the lowest with a face of open fraction A_f > 0, ``fractions`` =
        (frac_u, frac_v, frac_w) of the wind: with cut cells the air right over the terrain),
        as a horizontal vector: the direction of the A_f-weighted mean of its two u (and v)
        faces, the length of the whole wind with the w of its top face (when open): on a slope
        the air turns upward, and its speed along the surface is not lost."""

    def saltation_flux(self, wind_x, wind_y, column_x0, column_y0, cell_size, hx0, hy0, spacing,
                       has_surface, ustar_per_speed, threshold, flux_scale, heading_x, heading_y,
                       flux_x, flux_y, height=None, snow_depth=None, bubble_top=None):
        """flux_x, flux_y (ny, nx) float32 m^2/s: the saltation volume flux at each heightmap
        node (origin (hx0, hy0), node ``spacing`` m) from the surface wind of the columns
        (centres at column_x0 + (i + 0.5) cell_size, ...; sampled bilinearly); 0 at open nodes,
        where u* <= threshold (m/s), and where the surface wind blows against the wind's
        heading (heading_x, heading_y), a unit vector: the reversed flow of a lee eddy is
        sheltered (the log law, made for attached flow, would overstate its shear)."""

    def drift_transport(self, flux_x, flux_y, height, has_surface, snow_depth, courant, max_rise,
                        snow_out, downwind_axis=-1, wrap=None, boundary=0, inflow_limit=0.0,
                        books=None):
        """One transport step from ``snow_depth`` into ``snow_out`` (both (ny, nx) float32 m,
        must not alias) over terrain ``height`` (m); courant = dt / spacing (s/m); no transfer
        up a step of more than ``max_rise`` m (the repose slope times the spacing)."""

    def column_surface(self, height, snow_depth, has_surface, hx0, hy0, spacing, x0, y0, cell_size,
                       surface_out):
        """surface_out (ny_w, nx_w) float32 m: the highest surface (terrain + snow) of the
        heightmap nodes inside each wind column (node (i, j) lies in column floor((hx0 + i
        spacing - x0) / cell_size), ...), NO_SURFACE where there is none: thin obstacles such
        as fences keep their height on the coarser grid."""

    def separation_bubble(self, column_height, x0, y0, cell_size, heading_x, heading_y, slope,
                          rise, edge, spread, max_distance, bubble_top):
        """The separated flow in the lee of obstacles, from the surface alone (the inviscid
        wind solver keeps flow attached behind sharp edges)."""

    def horseshoe_vortex(self, column_height, cell_size, heading_x, heading_y, reach, gain, leg,
                         max_cells, scour):
        """The horseshoe vortex that wraps around the windward base of a bluff obstacle and
        trails downwind of its sides in two legs, from the surface alone (the inviscid wind
        solver has no boundary layer to roll it up)."""


#: Every stage a build provides: ``Backend.kernel_module(stage)`` hands out its module.
STAGES = {"heightmap": HeightmapKernels, "wind": WindKernels, "pressure": PressureKernels,
          "flakes": FlakesKernels, "cover": CoverKernels, "drift": DriftKernels}
