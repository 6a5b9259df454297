"""Baked flakes as a Blender particle system whose point cache is exactly the engine's frames.

Route (measured in docs/particles.md, benchmarks/particle_routes.py): the engine's positions
are written straight into Blender point-cache files (.bphys, see snow_addon/formats/ptcache.py) in a
folder beside the .blend, and the particle system reads them as an *external* cache. Blender
never simulates or rewrites them; the .blend stores only the folder (relative, ``//``), so
the folder must travel with the .blend (Blender's ``blendcache_<name>`` convention).

Units: positions in metres, world space; velocities in m/s (the particle settings' timestep
is set to one frame, so Blender's particle velocity unit is m/s too); frames are scene frames.

Respawned flakes (motion blur): Blender interpolates a cached particle between the two
cached frames around a sub-frame, so a flake that respawns between frames f-1 and f would be
drawn along the jump from ground to sky during (f-1, f). Every record carries its particle's
(birth, death, lifetime) times, which Blender reads per frame; the record of frame f-1 of a
flake that respawns at f gets birth time f. Blender then treats it as unborn at f-1 and
throughout (f-1, f): it draws no instance there, and Cycles hides an instance that is missing
at a motion step (Object "hide on missing motion"), so no streak can be drawn. The flake's
stored position at f-1 stays exactly what the engine wrote.

Under Blender 4.2 to 4.5 a new bake stores the flakes as a Geometry Nodes bake instead
(operators/gn_flakes.py, blender_compat.FLAKE_CACHE); the functions below that take the
flakes object (cache_directory, frame_path, velocity_scale, finish_flake_bake,
free_flake_bake, baked_range, read_flake_frame, evaluate_flakes) serve both forms.
"""
from __future__ import annotations

import os

import bpy
import numpy as np

from ..snow_addon.bake_cache import write_atomic
from ..snow_addon.errors import SnowInputError
from ..snow_addon.formats import ptcache
# The writer thread's side lives in snow_addon/formats/frame_store.py (no bpy).
from ..snow_addon.formats.frame_store import (BIRTH_FRAME, CACHE_INDEX, CACHE_NAME, NEVER_FRAME,
                                              encode_flake_frame, velocity_step_for)
from . import gn_flakes
from .flake_material import ensure_flake_material

#: The flakes object of a bake, in either form (this particle system, or the Geometry
#: Nodes bake of gn_flakes.py).
FLAKE_EMITTER_NAME = "Snowfall Flakes"
SYSTEM_NAME = "SnowfallFlakes"
FLAKE_OBJECT_NAME = "SnowfallFlake"
TEMPLATE_COLLECTION_NAME = "SnowfallTemplates"
#: At most this many flakes are drawn in the viewport (render draws all).
VIEWPORT_FLAKES = 200_000


# --------------------------------------------------------------------------------------------
# setup

def ensure_flake_system(scene, emitter_name_or_obj, flake_count: int, flake_size: float = 0.004,
                        cache_dir: str | None = None, size_random: float | None = None):
    """Create or reuse the emitter object and its flake particle system; return the emitter.

    flake_count: number of flakes N. flake_size: radius of the largest flake, Blender units;
    size_random: flakes' radii vary down to (1 - size_random) times it (default
    FLAKE_SIZE_RANDOM).
    cache_dir: folder of the .bphys files; default ``//blendcache_<blend name>/`` beside the
    saved .blend (Blender's own convention, so it travels with the file). An absolute path or
    a ``//``-relative one may be given instead; an unsaved .blend needs an explicit folder.
    """
    if isinstance(flake_count, bool) or not isinstance(flake_count, (int, np.integer)) \
            or flake_count < 1:
        raise SnowInputError("flake_count", f"must be a whole number >= 1, got {flake_count!r}",
                             "100000")
    if flake_count > 2**31 - 1:
        raise SnowInputError("flake_count", f"{flake_count} exceeds Blender's particle limit",
                             "fewer than 2147483647")
    if not (np.isfinite(flake_size) and flake_size > 0.0):
        raise SnowInputError("flake_size", f"must be a positive length in metres, got "
                             f"{flake_size!r}", "0.004")
    if size_random is None:
        size_random = FLAKE_SIZE_RANDOM
    if not (0.0 <= size_random <= 1.0):
        raise SnowInputError("size_random", f"must lie in [0, 1], got {size_random!r}", "0.67")
    if cache_dir is None:
        if not bpy.data.filepath:
            raise SnowInputError("blend file", "the .blend is not saved, and the flake cache "
                                 "lives in a folder beside it", "saving the .blend first")
        stem = os.path.splitext(os.path.basename(bpy.data.filepath))[0]
        cache_dir = f"//blendcache_{stem}/"
    if cache_dir.startswith("//") and not bpy.data.filepath:
        raise SnowInputError("cache_dir", f"{cache_dir!r} is relative to an unsaved .blend",
                             "an absolute folder, or saving the .blend first")

    emitter = _ensure_emitter(scene, emitter_name_or_obj)
    psys = _ensure_particle_system(emitter)
    settings = psys.settings
    fps = scene.render.fps / scene.render.fps_base

    settings.type = 'EMITTER'
    settings.count = int(flake_count)
    settings.frame_start = BIRTH_FRAME
    settings.frame_end = BIRTH_FRAME
    settings.lifetime = NEVER_FRAME
    settings.lifetime_random = 0.0
    settings.emit_from = 'VERT'
    settings.use_emit_random = False
    settings.normal_factor = 0.0
    settings.factor_random = 0.0
    settings.object_align_factor = (0.0, 0.0, 0.0)
    settings.physics_type = 'NEWTON'     # PHYS_NO particles never read a point cache
    settings.mass = 1.0
    settings.brownian_factor = 0.0
    settings.drag_factor = 0.0
    settings.damping = 0.0
    settings.effector_weights.gravity = 0.0
    settings.effector_weights.all = 0.0
    settings.use_rotations = False        # cache holds index, location, velocity, times only
    settings.use_dead = False
    settings.show_unborn = False
    settings.use_die_on_collision = False
    # One particle time step per frame, so the cached velocity is in m/s and the Hermite
    # interpolation Blender uses between cached frames gets the real frame-to-frame tangent.
    settings.timestep = 1.0 / fps
    settings.use_adaptive_subframes = False
    settings.subframes = 0
    settings.child_type = 'NONE'

    flake = _ensure_flake_object(flake_size)
    settings.render_type = 'OBJECT'
    settings.instance_object = flake
    settings.particle_size = flake_size
    settings.size_random = size_random
    settings.use_rotation_instance = False
    settings.use_scale_instance = True
    settings.display_method = 'DOT'
    settings.display_percentage = max(1, min(100, int(100 * VIEWPORT_FLAKES / flake_count)))
    emitter.show_instancer_for_render = False
    emitter.show_instancer_for_viewport = True

    cache = psys.point_cache
    cache.use_disk_cache = True
    cache.name = CACHE_NAME
    cache.index = CACHE_INDEX
    cache.filepath = cache_dir
    cache.use_external = True
    return emitter


def _ensure_emitter(scene, emitter_name_or_obj):
    if isinstance(emitter_name_or_obj, str):
        emitter = bpy.data.objects.get(emitter_name_or_obj)
        if emitter is None:
            mesh = bpy.data.meshes.new(emitter_name_or_obj)
            mesh.from_pydata([(0.0, 0.0, 0.0)], [], [])
            emitter = bpy.data.objects.new(emitter_name_or_obj, mesh)
    else:
        emitter = emitter_name_or_obj
    if emitter.type != 'MESH':
        raise SnowInputError("emitter", f"{emitter.name!r} is a {emitter.type}, not a mesh",
                             "a new emitter name")
    if emitter.name not in scene.objects:
        scene.collection.objects.link(emitter)
    return emitter


def _ensure_particle_system(emitter):
    for modifier in emitter.modifiers:
        if modifier.type == 'PARTICLE_SYSTEM' and modifier.particle_system.name == SYSTEM_NAME:
            return modifier.particle_system
    modifier = emitter.modifiers.new(SYSTEM_NAME, 'PARTICLE_SYSTEM')
    psys = modifier.particle_system
    psys.name = SYSTEM_NAME
    psys.settings.name = SYSTEM_NAME
    return psys


def flake_particle_system(emitter):
    """The flake particle system of ``emitter`` (KeyError when it has none)."""
    for modifier in emitter.modifiers:
        if modifier.type == 'PARTICLE_SYSTEM' and modifier.particle_system.name == SYSTEM_NAME:
            return modifier.particle_system
    raise KeyError(f"{emitter.name!r} has no {SYSTEM_NAME} particle system")


def _ensure_flake_object(flake_size: float):
    """The instanced flake: a unit-radius icosphere (scaled by the particle size) in a
    snow material."""
    flake = bpy.data.objects.get(FLAKE_OBJECT_NAME)
    if flake is None:
        import bmesh
        mesh = bpy.data.meshes.new(FLAKE_OBJECT_NAME)
        shape = bmesh.new()
        bmesh.ops.create_icosphere(shape, subdivisions=1, radius=1.0)
        shape.to_mesh(mesh)
        shape.free()
        mesh.shade_smooth()
        flake = bpy.data.objects.new(FLAKE_OBJECT_NAME, mesh)
    # The particle settings' reference alone does not keep the object in a saved .blend: it
    # lives in a collection that is kept (fake user) but not linked to any scene, so the
    # template itself is never rendered.
    templates = bpy.data.collections.get(TEMPLATE_COLLECTION_NAME)
    if templates is None:
        templates = bpy.data.collections.new(TEMPLATE_COLLECTION_NAME)
        templates.use_fake_user = True
    if flake.name not in templates.objects:
        templates.objects.link(flake)
    material = ensure_flake_material(flake_size)
    if material.name not in flake.data.materials:
        flake.data.materials.clear()
        flake.data.materials.append(material)
    return flake


#: Flakes vary in radius from (1 - FLAKE_SIZE_RANDOM) times the flake size up to it (a
#: third to all of it: real flakes range from single crystals to aggregates).
FLAKE_SIZE_RANDOM = 0.67


# --------------------------------------------------------------------------------------------
# bake

def cache_directory(emitter) -> str:
    """Absolute folder of the flake cache files."""
    if gn_flakes.is_gn_flakes(emitter):
        return gn_flakes.bake_directory(emitter)
    cache = flake_particle_system(emitter).point_cache
    return os.path.normpath(bpy.path.abspath(cache.filepath))


def frame_path(emitter, frame: int) -> str:
    """Absolute path of the .bphys file of ``frame`` (0 is the info file); of a Geometry
    Nodes bake, the frame's blob (its arrays)."""
    if gn_flakes.is_gn_flakes(emitter):
        return gn_flakes.frame_path(emitter, frame)
    return os.path.join(cache_directory(emitter),
                        ptcache.cache_filename(CACHE_NAME, frame, CACHE_INDEX))


def velocity_scale(scene, emitter) -> float:
    """Factor from m/s to the cache's velocity unit (1 when the timestep is one frame, and
    for a Geometry Nodes bake, whose ``velocity`` is in units/s)."""
    if gn_flakes.is_gn_flakes(emitter):
        return 1.0
    settings = flake_particle_system(emitter).settings
    fps = scene.render.fps / scene.render.fps_base
    return 1.0 / (fps * settings.timestep)


def write_flake_frame(emitter, frame: int, positions, velocities, respawned) -> None:
    """Store one frame: positions (N,3) float32 m, velocities (N,3) float32 m/s, respawned
    (N,) bool (True: the flake respawned since the previous frame, so ``positions`` hold its
    new life). The previous frame's record of each respawned flake is marked unborn (that
    file is rewritten), which hides it from f-1 until f so motion blur draws no jump.

    Synchronous, for scripts and tests; the bake writes through ``encode_flake_frame`` on
    its writer thread and marks respawns before the previous frame is first written."""
    psys = flake_particle_system(emitter)
    count = psys.settings.count
    frame = _check_frame("frame", frame)
    positions = _check_vectors("positions", positions, count)
    velocities = _check_vectors("velocities", velocities, count)
    respawned = np.asarray(respawned)
    if respawned.shape != (count,) or respawned.dtype != np.bool_:
        raise SnowInputError("respawned", f"must be a ({count},) bool array, got "
                             f"{respawned.shape} {respawned.dtype}", "np.zeros(N, bool)")

    directory = cache_directory(emitter)
    os.makedirs(directory, exist_ok=True)
    ensure_info_file(emitter, count)
    scene = bpy.context.scene
    scale = np.float32(velocity_scale(scene, emitter))
    cache_velocities = velocities if scale == 1.0 else velocities * scale
    compression, step = cache_compression(), velocity_step(scene)
    births = np.full(count, BIRTH_FRAME, np.float32)
    write_atomic(
        frame_path(emitter, frame),
        encode_flake_frame(positions, cache_velocities, births, compression, step))
    previous = frame_path(emitter, frame - 1)
    if frame > 1 and respawned.any() and os.path.exists(previous):
        records = ptcache.read_frame(previous).records
        births = records["times"][:, 0].copy()
        births[respawned] = float(frame)
        write_atomic(previous, encode_flake_frame(
            records["location"], records["velocity"], births, compression, step))


# --------------------------------------------------------------------------------------------
# the compact frame format (pure numpy: runs on the bake's writer thread)

#: What a flake frame holds: location, velocity and (birth, death, lifetime) times, one
#: array per field, compressed; no index (the i-th point of a file is particle i).
FLAKE_DATA_TYPES = (1 << ptcache.BPHYS_DATA_LOCATION) | \
    (1 << ptcache.BPHYS_DATA_VELOCITY) | (1 << ptcache.BPHYS_DATA_TIMES)


def cache_compression(version=None) -> int:
    """The point-cache compression the bake writes for this Blender (or ``version``):
    Zstd on filtered bytes for 5.0 and later. Blender 4.2 to 4.5 read only LZO and LZMA;
    ptcache writes LZMA, but at about 3 us per flake-frame on two cores (Python's
    lzma on float data) it would be what a bake waits for, so their files are written
    uncompressed (40 B per flake-frame), which every version reads."""
    version = tuple(version if version is not None else bpy.app.version)
    compression = ptcache.compression_for(version)
    return compression if compression != ptcache.COMPRESS_LZMA else \
        ptcache.COMPRESS_NONE


def velocity_step(scene_or_fps) -> float:
    """Quantisation step of the stored velocities (units/s, a power of two): the largest
    one whose effect on Blender's interpolation between two frames stays under
    SUBFRAME_ERROR (frame_store.velocity_step_for)."""
    fps = scene_or_fps if isinstance(scene_or_fps, (int, float)) else \
        scene_or_fps.render.fps / scene_or_fps.render.fps_base
    return velocity_step_for(fps)


# --------------------------------------------------------------------------------------------
# writing only the flakes the camera sees

#: Sentinel: camera_view reads the falloff from the scene's settings.
_SCENE_FALLOFF = object()


def camera_view(scene, camera=None, margin: float = 0.1, falloff=_SCENE_FALLOFF) -> dict:
    """The camera's view as plain numbers (json-able, for bake.json and the writer thread):
    world-to-camera matrix, whether it is perspective, and the view's bounds (x/-z and y/-z
    for perspective, x and y for orthographic) widened by ``margin`` times its width and
    height on every side; ``falloff``: the full density distance (scene units) beyond which
    a perspective camera's flakes thin out (frame_store.in_camera_view), or None for none.
    By default it comes from the scene's settings (Thin Out Far Flakes, Full Density
    Distance). Raises SnowInputError when the scene has no camera."""
    camera = camera or scene.camera
    if camera is None or camera.type != 'CAMERA':
        raise SnowInputError("camera", "the scene has no camera to cull the flakes to",
                             "setting the scene camera, or writing every flake")
    if not (0.0 <= margin <= 10.0):
        raise SnowInputError("camera_margin", f"must lie in [0, 10], got {margin!r}", "0.1")
    if falloff is _SCENE_FALLOFF:
        props = getattr(scene, "snowfall", None)
        falloff = float(props.camera_falloff_distance) \
            if props is not None and props.use_camera_falloff else None
    if falloff is not None and not (np.isfinite(falloff) and falloff > 0.0):
        raise SnowInputError("camera_falloff_distance", f"must be a positive distance, got "
                             f"{falloff!r}", "15 m")
    corners = [tuple(c) for c in camera.data.view_frame(scene=scene)]
    perspective = camera.data.type != 'ORTHO'
    if perspective:
        xs = [c[0] / -c[2] for c in corners]
        ys = [c[1] / -c[2] for c in corners]
    else:
        xs = [c[0] for c in corners]
        ys = [c[1] for c in corners]
    width, height = max(xs) - min(xs), max(ys) - min(ys)
    view = {"matrix": [list(row) for row in camera.matrix_world.inverted()],
            "perspective": perspective,
            "bounds": [min(xs) - margin * width, max(xs) + margin * width,
                       min(ys) - margin * height, max(ys) + margin * height],
            "camera": camera.name, "margin": margin}
    if falloff is not None and perspective:
        view["falloff"] = float(falloff)
    return view


def ensure_info_file(emitter, count: int) -> None:
    """Blender's frame-0 info file: the particle count and every particle's times (a
    Geometry Nodes bake has none)."""
    if gn_flakes.is_gn_flakes(emitter):
        return
    path = frame_path(emitter, 0)
    if os.path.exists(path) and \
            os.path.getsize(path) == ptcache.file_size(count, ptcache.INFO_FRAME_TYPES):
        return
    os.makedirs(os.path.dirname(path), exist_ok=True)
    records = np.zeros(count, dtype=ptcache.record_dtype(ptcache.INFO_FRAME_TYPES))
    records["times"][:, 0] = BIRTH_FRAME
    records["times"][:, 1] = NEVER_FRAME
    records["times"][:, 2] = NEVER_FRAME
    ptcache.write_frame(path, records, ptcache.INFO_FRAME_TYPES)


def finish_flake_bake(emitter, first_frame: int, last_frame: int) -> None:
    """Check every frame in [first_frame, last_frame] was written, drop stale frames outside
    it, and have Blender load the folder as a baked external cache (frame range = the files)."""
    first_frame = _check_frame("first_frame", first_frame)
    last_frame = _check_frame("last_frame", last_frame)
    if last_frame < first_frame:
        raise SnowInputError("last_frame", f"{last_frame} is before first frame {first_frame}",
                             f"{first_frame} or later")
    if gn_flakes.is_gn_flakes(emitter):
        gn_flakes.finish(emitter, first_frame, last_frame)
        return
    missing = [f for f in range(first_frame, last_frame + 1)
               if not os.path.exists(frame_path(emitter, f))]
    if missing:
        raise SnowInputError("frames", f"{len(missing)} frame(s) were never written, first "
                             f"{missing[0]}", "writing every frame of the range")
    for frame in _cached_frames(emitter):
        if frame != 0 and not first_frame <= frame <= last_frame:
            os.remove(frame_path(emitter, frame))
    _reload_cache(emitter)
    cache = flake_particle_system(emitter).point_cache
    if not (cache.is_baked and cache.frame_start == first_frame
            and cache.frame_end == last_frame):
        raise RuntimeError(f"Blender did not load the flake cache in {cache_directory(emitter)}: "
                           f"{cache.info}")


def free_flake_bake(emitter) -> None:
    """Delete the flake cache files (and their folder when it is left empty)."""
    if gn_flakes.is_gn_flakes(emitter):
        gn_flakes.free(emitter)
        return
    directory = cache_directory(emitter)
    for frame in _cached_frames(emitter):
        os.remove(frame_path(emitter, frame))
    if os.path.isdir(directory) and not os.listdir(directory):
        os.rmdir(directory)
    cache = flake_particle_system(emitter).point_cache
    cache.use_external = False
    with bpy.context.temp_override(point_cache=cache, object=emitter):
        bpy.ops.ptcache.free_bake()       # clears Blender's baked flag
    cache.use_external = True
    emitter.update_tag()


def baked_range(emitter):
    """(first, last) frame Blender shows of the flake cache, or None when none is baked."""
    if gn_flakes.is_gn_flakes(emitter):
        return gn_flakes.baked_range(emitter)
    cache = flake_particle_system(emitter).point_cache
    return (cache.frame_start, cache.frame_end) if cache.is_baked else None


def _cached_frames(emitter) -> list[int]:
    directory = cache_directory(emitter)
    if not os.path.isdir(directory):
        return []
    prefix, suffix = f"{CACHE_NAME}_", f"_{CACHE_INDEX:02d}{ptcache.EXTENSION}"
    frames = []
    for name in os.listdir(directory):
        middle = name[len(prefix):-len(suffix)]
        if name.startswith(prefix) and name.endswith(suffix) and middle.isdigit():
            frames.append(int(middle))
    return sorted(frames)


def show_flake_frames(emitter) -> None:
    """Let Blender show the flake frames on disk so far, while a bake is still writing more
    (unlike finish_flake_bake: nothing is checked or removed, the bake is not marked done)."""
    if gn_flakes.is_gn_flakes(emitter):
        gn_flakes.set_enabled(emitter, True)
    else:
        _reload_cache(emitter)


def _reload_cache(emitter) -> None:
    """Make Blender rescan the external cache folder (setting use_external re-reads it)."""
    cache = flake_particle_system(emitter).point_cache
    cache.use_external = False
    cache.use_external = True
    emitter.update_tag()


# --------------------------------------------------------------------------------------------
# read back

def read_flake_frame(emitter, frame: int) -> np.ndarray:
    """Positions (N,3) float32 of the flakes at ``frame`` as Blender evaluates them (scene set
    to that frame, evaluated particle locations); the scene's frame is restored after."""
    return evaluate_flakes(emitter, frame)[0]


def evaluate_flakes(emitter, frame: float):
    """Blender's evaluation of the flakes at a (sub)frame: positions (N,3) float32 m,
    velocities (N,3) float32 m/s and alive (N,) bool (False: unborn or dead, not drawn).
    A Geometry Nodes bake gives its points (every one drawn; fewer than N where a
    camera-culled bake wrote only the flakes in view: gn_flakes.evaluate)."""
    if gn_flakes.is_gn_flakes(emitter):
        return gn_flakes.evaluate(emitter, frame)
    scene = bpy.context.scene
    restore = (scene.frame_current, scene.frame_subframe)
    whole = int(np.floor(frame))
    scene.frame_set(whole, subframe=float(frame - whole))
    try:
        depsgraph = bpy.context.evaluated_depsgraph_get()
        evaluated = emitter.evaluated_get(depsgraph)
        particles = evaluated.particle_systems[flake_particle_system(emitter).name].particles
        count = len(particles)
        positions = np.empty(count * 3, dtype=np.float32)
        velocities = np.empty(count * 3, dtype=np.float32)
        alive = np.empty(count, dtype=np.int32)
        particles.foreach_get("location", positions)
        particles.foreach_get("velocity", velocities)
        particles.foreach_get("alive_state", alive)
        scale = np.float32(velocity_scale(scene, emitter))
        alive_code = particles[0].bl_rna.properties["alive_state"].enum_items["ALIVE"].value \
            if count else 0
    finally:
        scene.frame_set(restore[0], subframe=restore[1])
    return (positions.reshape(count, 3), velocities.reshape(count, 3) / scale,
            alive == alive_code)


# --------------------------------------------------------------------------------------------
# input checks

def _check_frame(setting: str, frame) -> int:
    if isinstance(frame, bool) or not isinstance(frame, (int, np.integer)) or frame < 1:
        raise SnowInputError(setting, f"must be a whole frame >= 1 (Blender's point cache "
                             f"keeps frame 0 for its info file), got {frame!r}", "1")
    return int(frame)


def _check_vectors(setting: str, array, count: int) -> np.ndarray:
    array = np.asarray(array)
    if array.shape != (count, 3):
        raise SnowInputError(setting, f"must have shape ({count}, 3), got {array.shape}",
                             "the engine's flake arrays")
    if array.dtype != np.float32:
        raise SnowInputError(setting, f"must be float32, got {array.dtype}",
                             "array.astype(np.float32)")
    if not np.isfinite(array).all():
        raise SnowInputError(setting, "holds NaN or infinite values", "finite values")
    return np.ascontiguousarray(array)
