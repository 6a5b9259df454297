"""Bake and Resume: step the engine frame by frame; each finished frame goes to the bake
folder on disk (flakes, snow depth, engine checkpoint: snow_addon/bake_cache.py) on a
background thread; Blender shows the snow through a Geometry Nodes surface reading the
folder's depth files (older bakes: one snow depth attribute per frame on the terrain).

``BakeJob`` is plain Python: it validates everything before it changes anything, then
advances one simulation substep per ``advance()`` call, so a caller decides how much work
to do between UI events. The modal operator steps it from a timer (Blender stays
responsive; Esc stops after the current substep); ``execute`` (EXEC_DEFAULT, scripts,
farms, tests) runs it to the end synchronously.

Frames: the scene's first frame holds the initial state (no snow, flakes at their start
positions); every later frame is ``substeps`` steps of 1 / (fps x substeps) s after the
previous one.

The cache folder is the bake: ``progress.json`` names the last frame whose files (flakes up
to the frame before, snow depth, checkpoint) are all complete on disk. Resume reads only
the folder, so it continues after Esc, after Blender quit, and after a crash or a kill with
the .blend never saved: from the last committed frame, bit for bit what an uninterrupted
bake gives. Flake frame f is written once frame f+1 is known (its respawns mark frame f's
records unborn, docs/particles.md), so the newest frame's flakes are written at the end.
A bake's running state lives only in this module's ``_RUNNING`` table, never in the file.
"""
from __future__ import annotations

import json
import os
import time

import bpy
import numpy as np

from .. import blender_compat
from ..snow_addon import bake_cache
from ..snow_addon.bake_cache import BakeCacheError, BakeFolder, BakeWriter, CommitRecord
from ..snow_addon.errors import SnowInputError, SnowSimulationError
from ..properties import (cache_folder_setting, flake_radius, terrain_objects, to_snow_settings,
                          unit_scale)
from ..snow_addon.formats import gn_bake
from ..snow_addon.formats.frame_store import (GN_BAKE, PTCACHE, SUBFRAME_ERROR, FlakeCopier,
                                              FrameStore, flake_file_name)
from . import engine, gn_flakes, ownership, particle_output, snow_output, snow_surface
from .background import BackgroundOperator
from .engine import WARM_UP_TASK
from .particle_output import FLAKE_EMITTER_NAME
from .shown_wind import ShownWind
from .scene_io import flake_cache_folder, read_terrain, resolve_cache_folder, scene_fences

META_NAME = bake_cache.META_NAME
#: Frames the writer thread may hold queued before Bake waits for it (bounds memory).
WRITER_QUEUE = 2
#: A checkpoint (the whole engine state) is written when this many seconds have passed
#: since the last one, and at the end of a bake: a crash costs at most this much
#: simulation, and a big scene does not write its state every frame. The environment
#: variable SNOWFALL_CHECKPOINT_SECONDS overrides it (0: every frame).
CHECKPOINT_SECONDS = 1.0


def checkpoint_seconds() -> float:
    try:
        return max(0.0, float(os.environ.get("SNOWFALL_CHECKPOINT_SECONDS", CHECKPOINT_SECONDS)))
    except ValueError:
        return CHECKPOINT_SECONDS

#: scene pointer -> running BakeJob (runtime only; cleared on file load).
_RUNNING: dict = {}


def running_job(scene):
    return _RUNNING.get(scene.as_pointer())


def scene_cache_folder(cache_root: str, scene) -> str:
    return os.path.join(cache_root, bpy.path.clean_name(scene.name))


def read_meta(folder: str):
    """bake.json of a scene's cache folder with the last committed frame as ``frame``, or
    None when the folder holds no bake."""
    bake = BakeFolder(folder)
    if not bake.exists():
        return None
    meta = bake.read_meta()
    record = bake.read_progress()
    meta["frame"] = record.complete if record is not None else None
    meta["checkpoint_frame"] = record.frame if record is not None else None
    return meta


class BakeJob:
    """One bake (or resume) of ``context.scene``. Construction validates and raises
    SnowInputError before anything in the file or on disk changes."""

    def __init__(self, context, resume: bool = False, backend: str | None = None,
                 camera_only: bool | None = None, camera_margin: float | None = None,
                 defer_simulation: bool = False, vertex_frames: bool = False,
                 flake_format: str | None = None):
        """Validate and read the scene (Blender's thread). Unless ``defer_simulation``, also
        build the simulation and open the bake; with it, the caller runs
        ``build_simulation()`` (any thread: it touches no Blender data) and then ``open()``
        (Blender's thread) itself, as the modal Bake does with the compile off the UI.

        How Blender shows the snow of a new bake: by default (``vertex_frames`` False) the
        "Snowfall Snow Surface" object, built by Geometry Nodes from the bake folder's
        OpenEXR depth files at the simulation's resolution (operators/snow_surface.py); the
        .blend does not grow with the frames. ``vertex_frames`` True, the older form (kept so
        that bakes made with it open, render and resume): one ``snow_depth_<frame>``
        attribute per frame on the terrain mesh, displaced by the "Snowfall Snow" modifier
        (operators/snow_output.py). A resumed bake keeps its own form.

        ``flake_format``: how a new bake stores its flakes (None: this Blender's own,
        ``blender_compat.FLAKE_CACHE``; ``blender_compat.FLAKE_CACHE_GN_BAKE`` works in every
        supported release). A resumed bake keeps its own."""
        if flake_format not in (None, blender_compat.FLAKE_CACHE_GN_BAKE,
                                blender_compat.FLAKE_CACHE_PTCACHE):
            raise SnowInputError("flake_format", f"unknown flake cache format {flake_format!r}",
                                 repr(blender_compat.FLAKE_CACHE))
        self._new_vertex_frames = bool(vertex_frames)
        self._new_flake_format = flake_format or blender_compat.FLAKE_CACHE
        self._prepare(context, resume, backend, camera_only, camera_margin)
        if not defer_simulation:
            self.build_simulation()
            self.open()

    def _prepare(self, context, resume, backend, camera_only, camera_margin) -> None:
        scene = context.scene
        props = scene.snowfall
        self.scene = scene
        self.resume = resume
        objects = terrain_objects(props)
        if not objects:
            raise SnowInputError("terrain", "no terrain is set",
                                 "selecting the terrain mesh(es) and pressing Set Terrain")
        meshes = [obj.data for obj in objects]
        if len(set(m.as_pointer() for m in meshes)) != len(meshes):
            raise SnowInputError("terrain", "two terrain objects share one mesh",
                                 "making them single users (Object > Relations > Make Single User)")
        cache_root = resolve_cache_folder(props)
        self.frame_start, self.frame_end = scene.frame_start, scene.frame_end
        # Write only the flakes the scene camera sees (plus a margin); all are simulated.
        # None: the scene's Flakes settings (Camera Only, Camera Margin) decide.
        if camera_only is None:
            camera_only = bool(getattr(props, "camera_only", False))
        if camera_margin is None:
            camera_margin = float(getattr(props, "camera_margin", 0.1))
        self.view = particle_output.camera_view(scene, margin=camera_margin) \
            if camera_only and not resume else None
        self.substeps = int(props.substeps)
        settings = to_snow_settings(props, scene, self.frame_start, self.frame_end)
        terrain = read_terrain(context, objects)
        self.parts = terrain.parts
        vertices, triangles = terrain.vertices, terrain.triangles
        #: The porous snow fences (the Porous Fences collection): only the wind feels them.
        self.fences = scene_fences(context, objects)
        self.cache = scene_cache_folder(cache_root, scene)
        self.folder = BakeFolder(self.cache)
        self.settings = settings
        self.terrain_digest = bake_cache.terrain_digest(vertices, triangles, self.fences)
        # this file's folder, writable, room on disk
        ownership.check_bake(self, context, self._new_vertex_frames)
        point = None
        if resume:
            point = self._resume_point()
        elif self.frame_start < 1:
            raise SnowInputError("frame_start", f"the scene starts at frame {self.frame_start}; "
                                 "particle caches start at frame 1", "a start frame of 1 or more")
        elif self.frame_end < self.frame_start:
            raise SnowInputError("frame_end", "the scene's end frame is before its start",
                                 "an end frame after the start frame")

        self.backend_choice = backend if backend is not None else props.backend
        self._terrain_arrays = (vertices, triangles)
        self._point = point
        self.sim = None
        #: "preparing" (building the simulation, compiling kernels on first use), "baking",
        #: "stopping", then "finished" or "stopped" (read by the panel and status bar).
        self.stage = "preparing"
        self.cancelled = False
        self.finished = False

    def build_simulation(self) -> None:
        """Build the engine's Simulation (and load the checkpoint to resume from): the slow
        part of starting a bake (heightmap, first-use kernel compilation). No Blender data
        is read or written here, so it may run on a worker thread."""
        from ..snow_addon.simulation import Simulation

        settings, point = self.settings, self._point
        vertices, triangles = self._terrain_arrays
        self.sim = Simulation(settings, vertices, triangles, backend=self.backend_choice,
                              fences=self.fences)
        if point is not None:
            checkpoint = os.path.join(self.cache, str(point.progress.checkpoint.get("file")))
            try:
                self.sim.load_state_dict(point.state)
            except SnowInputError as error:
                raise BakeCacheError(f"the checkpoint '{checkpoint}' does not fit this scene "
                                     f"({error.problem})", "baking again", checkpoint) from None
            expected = (point.frame - self.frame_start) * self.substeps
            if self.sim.step_index != expected:
                raise BakeCacheError(f"the checkpoint '{checkpoint}' holds step "
                                     f"{self.sim.step_index}, frame {point.frame} is step "
                                     f"{expected}", "baking again", checkpoint)

    def open(self) -> None:
        """Blender's side of starting the bake (Blender's thread, after build_simulation):
        from here on the file and the cache change."""
        scene, props, settings, point = self.scene, self.scene.snowfall, self.settings, \
            self._point
        resume = self.resume
        self.scale = unit_scale(scene)
        self.record = CommitRecord()
        if resume:
            self._reopen(point)
        else:
            ownership.free_bake(scene)
            self.frame = self.frame_start
            self.flake_format = self._new_flake_format
            self.emitter = self._ensure_flakes()
            if self.flake_format == GN_BAKE:
                self.compression, self.velocity_step = None, None
                gn_bake.free(gn_flakes.bake_directory(self.emitter))   # older frames
            else:
                self.compression = particle_output.cache_compression()
                self.velocity_step = particle_output.velocity_step(scene)
            self.vertex_frames = self._new_vertex_frames
            ownership.start_folder(self)   # a full disk: clear message, nothing half made
            props.flake_emitter = self.emitter
            self._setup_snow_display()
            props.baked_frame_start = self.frame_start
        self.flake_dir = particle_output.cache_directory(self.emitter)
        # The writer thread's half (no bpy): it fills self.record as frames reach the disk.
        ownership.write_info_file(self, settings.flake_count)   # a full disk: clear message
        self._velocity_scale = np.float32(particle_output.velocity_scale(scene, self.emitter)
                                          / self.scale)
        # Only the point cache marks respawned flakes (frame_store.FrameStore.store_frame).
        respawns = self.flake_format != GN_BAKE
        self.store = FrameStore(self.folder, self.flake_dir, self.compression,
                                self.velocity_step, self.sim.heightmap.height.astype(np.float32),
                                self.record, self.view, self.flake_format,
                                unit_scale=self.scale, velocity_scale=self._velocity_scale,
                                respawn_counts=self.sim.flake_respawn_counts() if respawns
                                else None)
        #: The bake thread's copy of each frame's flakes into reused host buffers.
        self._flake_copier = FlakeCopier(self.sim.flakes, respawns=respawns)
        props.backend_used = self.sim.backend.name
        props.backend_reason = self.sim.backend.reason
        self.substep = 0
        self.frames_done = 0
        #: Substeps simulated in this bake: one counter that only the simulation thread
        #: raises, so the progress Blender's thread reads from it never steps back (the
        #: substep goes back to 0 at a frame's end before ``frames_done`` counts the frame)
        self.substeps_done = 0
        self.frames_total = self.frame_end - self.frame
        self.started = time.perf_counter()
        #: Bake-thread seconds spent on output (host copies, the .blend's snow, handing
        #: frames to the writer, waiting for it); ``flush_seconds``: the wait at the end.
        self.output_seconds = 0.0
        self.flush_seconds = 0.0
        self.writer = BakeWriter(WRITER_QUEUE)
        #: Whether the next frames carry a copy of the wind for the viewport's overlay.
        self.publish_wind = ShownWind.wants_field(scene)
        self._checkpoint_time = time.perf_counter()
        self._checkpoint_frame = self.frame if resume else None
        self.checkpoint_seconds = checkpoint_seconds()
        if resume:
            positions = self.sim.flake_positions() / np.float32(self.scale)
            self.store.pending = (self.frame, positions,
                                  self.sim.flake_velocities() * self._velocity_scale,
                                  self.store.visible(positions))
        else:
            try:
                self._write_frame(self.frame_start, first=True)
            except BaseException:
                self.writer.close()      # no thread left behind by a bake that never ran
                raise
        self.stage = "baking"

    def fingerprint(self, frame: int) -> str:
        return bake_cache.fingerprint(self.settings, self.terrain_digest, self.frame_start,
                                      self.substeps, frame)

    def _meta(self) -> dict:
        scene, grid = self.scene, self.sim.heightmap.grid
        return {"scene": scene.name, "frame_start": self.frame_start,
                "owner": ownership.owner_record(scene, self.cache),
                "frame_end": self.frame_end, "substeps": self.substeps,
                "fps": scene.render.fps / scene.render.fps_base, "unit_scale": self.scale,
                "settings": json.loads(json.dumps(self.settings.to_dict(), default=str)),
                "terrain_sha256": self.terrain_digest, "blender": list(bpy.app.version),
                "fences": [{"porosity": fence.porosity, "triangles": len(fence.triangles)}
                           for fence in self.fences],
                "flakes": {"count": self.settings.flake_count, "format": self.flake_format,
                           "file": particle_output.CACHE_NAME,
                           "compression": self.compression, "velocity_step": self.velocity_step,
                           "camera_view": self.view,
                           "subframe_error": SUBFRAME_ERROR},
                "snow": {"format": "exr", "vertex_frames": self.vertex_frames,
                         "x0": grid.x0, "y0": grid.y0,
                         "spacing": grid.spacing, "nx": grid.nx, "ny": grid.ny}}

    def _ensure_flakes(self):
        """The flakes object of this bake's format: a particle emitter, or (Geometry Nodes
        bake) an object whose modifier stays disabled until the bake finishes."""
        scene, props = self.scene, self.scene.snowfall
        cache_dir = flake_cache_folder(props.cache_folder, scene)
        if self.flake_format == GN_BAKE:
            return gn_flakes.ensure_flakes(scene, FLAKE_EMITTER_NAME, cache_dir,
                                           flake_size=flake_radius(props, scene))
        return particle_output.ensure_flake_system(
            scene, FLAKE_EMITTER_NAME, self.settings.flake_count,
            flake_size=flake_radius(props, scene), cache_dir=cache_dir)

    def _setup_snow_display(self) -> None:
        if self.vertex_frames:
            for part in self.parts:
                snow_output.ensure_snow_modifier(part.obj, self.scale)
        else:
            self.surface = snow_surface.ensure_surface(
                self.scene, snow_surface.snow_folder_for_blend(
                    cache_folder_setting(self.scene), self.scene),
                self.sim.heightmap.grid, 1.0 / self.scale, self.frame_start, self.frame_start)

    def _show_range(self, last: int) -> None:
        """Blender shows the snow of frames frame_start..last."""
        if self.vertex_frames:
            for part in self.parts:
                snow_output.set_baked_range(part.obj, self.frame_start, last)
        else:
            snow_surface.set_range(self.surface, self.frame_start, last)

    # --- resume -----------------------------------------------------------------------------
    def _resume_point(self):
        """Check the bake folder against the scene and return where to continue."""
        if not self.folder.exists():
            raise SnowInputError("bake", f"there is no bake to resume in '{self.cache}'",
                                 "Bake (the cache folder was moved, freed or never written)")
        meta = self.folder.read_meta()
        if meta.get("frame_start") != self.frame_start or meta.get("substeps") != self.substeps \
                or meta.get("terrain_sha256") != self.terrain_digest:
            raise SnowInputError("bake", "the settings, frame range start, terrain or "
                                 "fences changed since the bake", "restoring them, or baking again")
        point = self.folder.resume_point(self.frame_start)
        if point.fingerprint != self.fingerprint(point.frame):
            raise SnowInputError("bake", "the settings, frame range start, terrain or "
                                 "fences changed since the bake", "restoring them, or baking again")
        if point.frame >= self.frame_end and point.frame in point.progress.flakes and \
                ownership.shows_bake(self.scene, self.cache) and \
                not ownership.adopted(self.scene):
            # (a file that lost its record, or opened before it picked the bake up again,
            # takes the bake back: Resume then only rebuilds what Blender shows)
            raise SnowInputError("frame_end", f"the bake already reaches frame {point.frame}",
                                 "a later scene end frame to bake more")
        self._meta_on_disk = meta
        return point

    def _reopen(self, point) -> None:
        """Blender's side of a resumed bake, rebuilt from the folder: the emitter, the snow
        modifiers and the snow of every committed frame the .blend does not hold."""
        scene, props = self.scene, self.scene.snowfall
        meta = self._meta_on_disk
        self.frame = point.frame
        ownership.claim(scene, self.cache)      # a bake of this file's under another name
        self.folder.remove_temporaries()
        self.flake_format = meta["flakes"].get("format", PTCACHE)
        compression = meta["flakes"]["compression"]
        self.compression = int(compression) if compression is not None else None
        self.view = meta["flakes"].get("camera_view")
        self.velocity_step = meta["flakes"]["velocity_step"]
        record = point.progress
        record.flakes = {f: v for f, v in record.flakes.items() if f < point.frame}
        record.snow = {f: v for f, v in record.snow.items() if f <= point.frame}
        record.complete = point.frame
        self.record = record
        emitter = props.flake_emitter
        if emitter is not None and emitter.name in scene.objects and not ownership._same(
                ownership.emitter_folder(emitter), self.cache):
            # It reads another folder (a copy's emitter still points at the original's):
            # removed from this file (no file of the other folder changes), made anew.
            props.flake_emitter = None
            bpy.data.objects.remove(emitter)
            emitter = None
        if emitter is None or emitter.name not in scene.objects or \
                gn_flakes.is_gn_flakes(emitter) != (self.flake_format == GN_BAKE):
            # Not in the .blend (never saved after the bake started): a new emitter reading
            # the folder. (Re-applying the settings to an existing system would make Blender
            # reset its cache and delete frame files, so an existing one is kept as it is.)
            emitter = self._ensure_flakes()
        elif self.flake_format == GN_BAKE:
            gn_flakes.set_enabled(emitter, False)     # until finish lists the folder anew
        self.emitter = emitter
        if self.flake_format == GN_BAKE:
            # Every committed flake frame must be readable (its JSON is not in the record).
            root = gn_flakes.bake_directory(emitter)
            gn_bake.remove_temporaries(root)
            for frame in sorted(record.flakes):
                gn_bake.check_frame(root, frame)
        props.flake_emitter = self.emitter
        self.vertex_frames = bool(meta["snow"].get("vertex_frames", True))
        self._setup_snow_display()
        if self.vertex_frames:    # the snow of committed frames the .blend does not hold
            in_file = props.baked_frame_end if props.has_bake else self.frame_start - 1
            shape = (self.sim.heightmap.grid.ny, self.sim.heightmap.grid.nx)
            for part in self.parts:
                have = set(snow_output.baked_frames(part.obj))
                for frame in range(self.frame_start, point.frame + 1):
                    if frame > in_file or frame not in have:
                        depth = bake_cache.read_depth(self.folder.depth_path(frame), shape)
                        snow_output.write_snow_frame(
                            part.obj, frame, _vertex_depth(self.sim, depth, part.vertices))
                snow_output.remove_frames_after(part.obj, point.frame)
        self._show_range(point.frame)
        props.baked_frame_start = self.frame_start
        props.baked_frame_end = point.frame
        props.has_bake = True

    # --- progress ---------------------------------------------------------------------------
    @property
    def done(self) -> bool:
        if self.sim is None or not hasattr(self, "frame"):
            return self.finished or self.cancelled
        return self.finished or self.cancelled or self.frame >= self.frame_end

    @property
    def progress(self) -> float:
        """The share of the bake's frames simulated; while the simulation is prepared, the
        share of a first-use kernel compile done (0 when there is none)."""
        if not hasattr(self, "frames_total"):
            background = getattr(self, "_background", None)
            return background.preparing_progress if background is not None else 0.0
        if self.frames_total <= 0:
            return 1.0
        return min(1.0, self.substeps_done / (self.frames_total * self.substeps))

    @property
    def seconds_per_frame(self):
        """Wall seconds per simulated frame since the stepping began (the simulation's build
        and any first-use kernel compile before it are left out)."""
        if not getattr(self, "frames_done", 0):
            return None
        return (time.perf_counter() - self.started) / self.frames_done

    @property
    def eta_seconds(self):
        per_frame = self.seconds_per_frame
        if per_frame is None:
            return None
        return per_frame * max(0.0, self.frames_total - self.substeps_done / self.substeps)

    def status_text(self) -> str:
        background = getattr(self, "_background", None)
        if self.stage == "preparing" and background is not None:
            return background.status_text()
        if self.stage == "stopping":
            return f"Snowfall: stopping after frame {self.frame}..."
        backend = self.sim.backend.name if self.sim is not None else "..."
        text = (f"Snowfall: frame {self.frame}/{self.frame_end} "
                f"({100.0 * self.progress:.0f}%) on {backend}")
        eta = self.eta_seconds
        if eta is not None:
            text += f", {self.seconds_per_frame:.2f} s/frame, ETA {_format_seconds(eta)}"
        return text + "  (Esc to stop)"

    # --- stepping ----------------------------------------------------------------------------
    def advance(self) -> bool:
        """One substep on this thread, and Blender's side of a finished frame. False when
        the bake is complete (or stopped)."""
        frame = self._step_engine()
        if frame is not None:
            self._show_frame(frame)
        return not self.done

    def _step_engine(self):
        """One substep of the engine, and the frame's files handed to the writer when it was
        the frame's last: returns that frame's ``_FrameDone``, else None. No Blender data is
        touched: the background bake runs this on the simulation thread."""
        if self.done:
            return None
        self.sim.step(1)
        self.substeps_done += 1
        self.substep += 1
        if self.substep < self.substeps:
            return None
        self.substep = 0
        # a run that left the model's range stops before it writes the frame
        # (SnowSimulationError): the frames before it are kept
        self.sim.check_health()
        return self._write_frame_files(self.frame + 1)

    def advance_frame(self) -> bool:
        """Substeps up to the end of the next frame."""
        while True:
            more = self.advance()
            if not more or self.substep == 0:
                return more

    def run(self) -> None:
        try:
            while self.advance():
                pass
        finally:
            self.finish()

    def _write_frame(self, frame: int, first: bool = False) -> None:
        """Hand frame ``frame`` to the writer thread and show it in the .blend."""
        self._show_frame(self._write_frame_files(frame, first))

    def _write_frame_files(self, frame: int, first: bool = False) -> "_FrameDone":
        """Host copies of everything frame ``frame`` writes, handed to the writer thread
        (no Blender data: any thread)."""
        started = time.perf_counter()
        sim = self.sim
        depth = sim.snow_depth()
        # The flakes' engine arrays as they are (the writer scales them, orders them into
        # (N, 3) and finds the respawns).
        flakes = self._flake_copier.copy()
        state = None
        if first or time.perf_counter() - self._checkpoint_time >= self.checkpoint_seconds:
            state = self._snapshot(frame)
        try:
            self.writer.submit(self.store.store_host_frame, frame, flakes, depth, state,
                               self.fingerprint(frame) if state else "")
        except Exception as error:
            raise self._write_error(error) from None
        wind = sim.wind_field() if self.publish_wind else None
        if not first:
            self.frame = frame
            self.frames_done += 1
        self.output_seconds += time.perf_counter() - started
        return _FrameDone(frame, first, depth if self.vertex_frames else None, wind,
                          sim.step_index, sim.time)

    def _show_frame(self, done: "_FrameDone") -> None:
        """Blender's side of a frame handed to the writer (Blender's thread)."""
        started = time.perf_counter()
        if self.vertex_frames:
            for part in self.parts:
                snow_output.write_snow_frame(part.obj, done.frame,
                                             _vertex_depth(self.sim, done.depth, part.vertices))
        props = self.scene.snowfall
        props.has_bake = True
        props.baked_frame_end = done.frame
        self._show_range(done.frame)
        if not done.first:
            props.seconds_per_frame = self.seconds_per_frame or 0.0
        if done.wind is not None:  # the viewport shows the wind while baking
            ShownWind.publish(done.wind, done.step, done.time, source="bake")
        self.publish_wind = ShownWind.wants_field(self.scene)
        self.output_seconds += time.perf_counter() - started

    def _snapshot(self, frame: int) -> dict:
        """A host copy of the engine state (the writer thread saves it as a checkpoint)."""
        self._checkpoint_time = time.perf_counter()
        self._checkpoint_frame = frame
        return {key: np.array(value, copy=True) for key, value in self.sim.state_dict().items()}

    def _write_error(self, error: BaseException) -> BaseException:
        """The message for a writer failure: the file, the reason, the space still needed."""
        if isinstance(error, SnowInputError):
            return error
        if not isinstance(error, OSError):
            return error
        path = getattr(error, "filename", None) or self.cache
        path = bake_cache.final_name(path)
        record = self.record
        done = record.complete if record.complete is not None else self.frame_start - 1
        sizes = [v[0] for v in record.flakes.values()] + [v[0] for v in record.snow.values()]
        frames_written = max(1, len(record.snow))
        per_frame = sum(sizes) / frames_written if sizes else 0
        checkpoint = (record.checkpoint or {}).get("bytes", 0)
        remaining = max(1, self.frame_end - done)
        needed = per_frame * remaining + 2 * checkpoint
        free = bake_cache.free_space(self.cache)
        problem = (f"cannot write '{path}' ({error.strerror or error}); the bake needs about "
                   f"{bake_cache.format_bytes(needed)} more for frames {done + 1}-{self.frame_end}"
                   f" ({bake_cache.format_bytes(per_frame)} a frame)")
        if free is not None:
            problem += f", {bake_cache.format_bytes(free)} are free"
        kept = f"frames {self.frame_start}-{done} are kept" if done >= self.frame_start else \
            "no frame was finished"
        return BakeCacheError(f"{problem}; {kept}",
                              "freeing disk space or a writable cache folder, then Resume",
                              path)

    def finish(self) -> None:
        """Close the bake: every finished frame stays; the particle cache is marked baked."""
        if self.finished:
            return
        self._finish_files()
        self._finish_blend()

    def _finish_files(self) -> None:
        """The engine's half of closing (any thread): a checkpoint of the last frame, the
        newest frame's flakes, and every queued write on disk. A write error is kept for
        ``_finish_blend`` to raise."""
        if getattr(self, "_files_finished", False):
            return
        self._files_finished = True
        started = time.perf_counter()
        self._finish_error = None
        try:
            if self.writer.error is None:
                if self.substep == 0 and self._checkpoint_frame != self.frame:
                    # The engine is at a frame's end: checkpoint it, so Resume starts there.
                    self.writer.submit(self.store.commit, self.frame, self._snapshot(self.frame),
                                       self.fingerprint(self.frame))
                self.writer.submit(self.store.flush_pending)
            self.writer.flush()
        except Exception as exc:
            self._finish_error = exc
        self.writer.close()
        self.flush_seconds = time.perf_counter() - started
        self.output_seconds += self.flush_seconds

    def _finish_blend(self) -> None:
        """Blender's half of closing (Blender's thread): show the frames on disk."""
        if self.finished:
            return
        self.finished = True
        self.stage = "stopped" if self.cancelled else "finished"
        _RUNNING.pop(self.scene.as_pointer(), None)
        # What Blender shows: the frames whose flakes and snow are both on disk.
        last = self._last_complete_frame()
        props = self.scene.snowfall
        if last >= self.frame_start:
            if self.vertex_frames:
                for part in self.parts:
                    snow_output.remove_frames_after(part.obj, last)
            self._show_range(last)
            props.baked_frame_end = last
            particle_output.finish_flake_bake(self.emitter, self.frame_start, last)
        self.frame = max(last, self.frame_start)
        if self._finish_error is not None:
            raise self._write_error(self._finish_error) from None

    def _last_complete_frame(self) -> int:
        record = self.record
        last = self.frame_start - 1
        while last + 1 in record.flakes and last + 1 in record.snow:
            last += 1
        return last

    def cancel(self) -> None:
        """Stop after the current substep, keeping every finished frame."""
        self.cancelled = True
        self.finish()

    # --- in the background (the modal Bake) --------------------------------------------------
    def start_in_background(self, worker) -> None:
        """Build the simulation and then step it on ``worker`` (snow_addon.worker.
        EngineWorker); Blender's thread calls ``poll()`` from a timer until it returns
        False. Everything that touches Blender data happens in ``poll``."""
        self._background = _BackgroundBake(self, worker)
        _RUNNING[self.scene.as_pointer()] = self

    def poll(self) -> bool:
        """Blender's thread: apply what the simulation thread finished since the last call
        (open the bake once the simulation is built, show new frames, close the bake when
        the stepping ended). True while the bake goes on. Raises what the bake raised."""
        return self._background.poll()

    def request_stop(self) -> None:
        """Stop after the current substep (Esc). Before the simulation is built nothing was
        changed yet: the bake ends at once (a first-use compile goes on in the background,
        so its kernels are ready next time)."""
        self.cancelled = True
        self._background.request_stop()


class _FrameDone:
    """A frame the engine handed to the writer: what Blender's side needs to show it."""

    __slots__ = ("frame", "first", "depth", "wind", "step", "time")

    def __init__(self, frame, first, depth, wind, step, time_s):
        self.frame, self.first, self.depth, self.wind = frame, first, depth, wind
        self.step, self.time = step, time_s


class _BackgroundBake:
    """The modal Bake's two tasks on the simulation thread: build the simulation (and
    compile the kernels on first use), then step it frame by frame until the end or Esc.
    Blender's thread opens the bake between the two and shows each finished frame."""

    #: Least wall seconds between two updates of the flakes Blender shows during a bake.
    SHOW_FLAKES_SECONDS = 2.0

    def __init__(self, job: BakeJob, worker):
        from ..snow_addon import kernel_cache

        self.job = job
        self.worker = worker
        self.first_use = engine.preparation()
        self.expected_seconds = kernel_cache.expected_seconds(
            self.first_use.folder if self.first_use is not None else None)
        self.build = worker.submit(self._build, "build the simulation")
        self.steps = None
        self._flakes_shown_at = 0.0
        self._flakes_shown = None

    # the simulation thread
    def _build(self, task) -> None:
        task.report(0.0, "building the simulation")
        self.job.build_simulation()

    def _step(self, task) -> None:
        job = self.job
        try:
            while not task.stopping:
                done = job._step_engine()
                if done is not None:
                    task.post(done)
                if job.done:
                    break
        finally:
            job._finish_files()

    # Blender's thread
    def status_text(self) -> str:
        ahead = self.worker.tasks_ahead_of(self.build)
        warm_up = next((t for t in ahead if t.name == WARM_UP_TASK), None)
        if warm_up is not None:
            left = max(0.0, self.expected_seconds * (1.0 - warm_up.progress))
            return (f"Snowfall: preparing the simulation for first use (compiling the CPU "
                    f"kernels), about {_format_seconds(left)} left "
                    f"({100.0 * warm_up.progress:.0f}%)  (Esc to stop)")
        if ahead:
            return "Snowfall: waiting for " + ahead[0].name + "  (Esc to stop)"
        seconds = time.perf_counter() - (self.build.started_at or time.perf_counter())
        return f"Snowfall: preparing the simulation ({seconds:.0f} s)  (Esc to stop)"

    @property
    def preparing_progress(self) -> float:
        ahead = self.worker.tasks_ahead_of(self.build)
        warm_up = next((t for t in ahead if t.name == WARM_UP_TASK), None)
        return warm_up.progress if warm_up is not None else 0.0

    def poll(self) -> bool:
        job = self.job
        if self.steps is None:
            if not self.build.done:
                return True
            if self.build.stopped or job.cancelled:
                job.stage = "stopped"
                _RUNNING.pop(job.scene.as_pointer(), None)
                job.finished = True
                return False
            if self.build.error is not None:
                job.finished = True
                _RUNNING.pop(job.scene.as_pointer(), None)
                self.build.raise_error()
            job.open()
            job.stage = "baking"
            self.steps = self.worker.submit(self._step, "bake " + job.scene.name)
        for done in self.steps.take_messages():
            job._show_frame(done)
        if not self.steps.done:
            self._show_flakes()
            return True
        for done in self.steps.take_messages():
            job._show_frame(done)
        if self.steps.error is not None:
            job._finish_error = job._finish_error or self.steps.error
        job._finish_blend()
        return False

    def _show_flakes(self) -> None:
        """Let the viewport show the flakes of the frames finished so far (every few
        seconds: Blender rereads the cache folder)."""
        job = self.job
        now = time.perf_counter()
        if now - self._flakes_shown_at < self.SHOW_FLAKES_SECONDS:
            return
        self._flakes_shown_at = now
        last = job._last_complete_frame()
        if last > job.frame_start and last != self._flakes_shown:
            self._flakes_shown = last
            particle_output.show_flake_frames(job.emitter)

    def request_stop(self) -> None:
        job = self.job
        if self.steps is None:
            # Nothing in the file or on disk changed yet: the bake ends now. A build under
            # way finishes on the simulation thread and is dropped.
            self.build.request_stop()
            job.stage = "stopped"
            job.finished = True
            _RUNNING.pop(job.scene.as_pointer(), None)
        else:
            job.stage = "stopping"
            self.steps.request_stop()


def particle_output_frame_name(frame: int) -> str:
    return flake_file_name(frame)


def _vertex_depth(sim, depth_grid, vertices):
    from ..snow_addon.terrain import vertex_snow_depth

    return vertex_snow_depth(sim.heightmap, depth_grid, vertices)


def _format_seconds(seconds: float) -> str:
    seconds = max(0, int(round(seconds)))
    if seconds < 60:
        return f"{seconds} s"
    minutes, seconds = divmod(seconds, 60)
    if minutes < 60:
        return f"{minutes} min {seconds:02d} s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes:02d} min"


class _BakeBase:
    bl_options = {"REGISTER"}
    resume = False
    #: Seconds between two timer events of the modal bake (each only polls the simulation
    #: thread and shows what it finished: Blender's thread never simulates).
    timer_seconds = 0.05

    interactive: bpy.props.BoolProperty(
        name="Interactive", default=False, options={"HIDDEN", "SKIP_SAVE"},
        description="Run beside the UI with progress (set by invoke; scripts bake at once)")
    vertex_frames: bpy.props.BoolProperty(
        name="Per-Vertex Snow Frames", default=False, options={"HIDDEN", "SKIP_SAVE"},
        description="A new bake in the older form: one snow depth attribute per frame on the "
        "terrain mesh instead of the Snow Surface (a resumed bake keeps its own form)")

    @classmethod
    def poll(cls, context):
        return context.scene is not None and running_job(context.scene) is None

    def _start(self, context, defer_simulation: bool = False):
        # The operator's own arguments where a script set them, else the scene's settings.
        # (Resume has neither: it keeps the bake's own view.)
        properties = getattr(self, "properties", None)
        camera_only = True if getattr(self, "camera_only", False) else None
        margin = None
        if properties is not None and "camera_margin" in properties.bl_rna.properties \
                and properties.is_property_set("camera_margin"):
            margin = float(self.camera_margin)
        try:
            return BakeJob(context, resume=self.resume, camera_only=camera_only,
                           camera_margin=margin, defer_simulation=defer_simulation,
                           vertex_frames=bool(getattr(self, "vertex_frames", False)))
        except SnowInputError as error:
            self.report({"ERROR"}, str(error))
            return None

    def execute(self, context):
        if self.interactive:          # confirmed in invoke's popup: bake beside the UI
            return self._start_modal(context)
        job = self._start(context)
        if job is None:
            return {"CANCELLED"}
        _RUNNING[context.scene.as_pointer()] = job
        try:
            job.run()
        except SnowInputError as error:   # the disk filled up or became read-only
            self.report({"ERROR"}, str(error))
            return {"CANCELLED"}
        self.report({"INFO"}, f"Snowfall: baked frames {job.frame_start}-{job.frame}")
        return {"FINISHED"}

    def invoke(self, context, event):
        self.interactive = True
        props = context.scene.snowfall
        if not self.resume and props.has_bake:
            # Baking again replaces the frames on disk: ask first.
            return context.window_manager.invoke_confirm(
                self, event, title="Replace the Snowfall bake?",
                message=(f"Frames {props.baked_frame_start}-{props.baked_frame_end} of this "
                         "bake are deleted and simulated again"), confirm_text="Bake Again",
                icon="WARNING")
        return self._start_modal(context)

    def _start_modal(self, context):
        job = self._start(context, defer_simulation=True)
        if job is None:
            return {"CANCELLED"}
        job.start_in_background(engine.worker())
        self._job = job
        wm = context.window_manager
        self._timer = wm.event_timer_add(self.timer_seconds, window=context.window)
        wm.modal_handler_add(self)
        wm.progress_begin(0, 1000)
        self._show_status(context)
        return {"RUNNING_MODAL"}

    def modal(self, context, event):
        job = self._job
        if event.type in {"ESC", "RIGHTMOUSE"} and event.value == "PRESS" \
                and job.stage in ("preparing", "baking"):
            preparing = job.stage == "preparing"
            job.request_stop()
            if preparing:                     # nothing was changed yet: stop at once
                return self._close(context, job)
            return self._keep_going(context)
        if event.type == "Z" and event.value == "PRESS" and (event.ctrl or event.oskey):
            # Undo would reload the scene under the bake's feet (its objects and settings):
            # the bake keeps it out until it ends.
            self.report({"WARNING"}, "Snowfall: undo waits until the bake ends (Esc stops it)")
            return {"RUNNING_MODAL"}
        if event.type != "TIMER":
            return {"PASS_THROUGH"}
        try:
            going = job.poll()
        except SnowInputError as error:   # bad scene data, the disk filled up or read-only
            self._end(context)
            self.report({"ERROR"}, str(error))
            return {"CANCELLED"}
        except SnowSimulationError as error:  # the run left the model's range
            self._end(context)
            _RUNNING.pop(context.scene.as_pointer(), None)
            kept = (f"frames {job.frame_start}-{job.frame} are kept" if job.frames_done
                    else "no frame was baked")
            self.report({"ERROR"}, f"Snowfall: stopped after frame {job.frame}; {kept}. "
                        f"{error}")
            return {"CANCELLED"}
        except Exception as error:        # a failure inside the engine: say what, keep Blender
            import traceback

            traceback.print_exc()
            self._end(context)
            _RUNNING.pop(context.scene.as_pointer(), None)
            self.report({"ERROR"}, f"Snowfall: the bake failed ({type(error).__name__}: "
                        f"{error}); finished frames are kept, the console has the details")
            return {"CANCELLED"}
        if going:
            return self._keep_going(context)
        return self._close(context, job)

    def _keep_going(self, context):
        self._show_status(context)
        return {"RUNNING_MODAL"}

    def _show_status(self, context):
        job = self._job
        context.window_manager.progress_update(int(1000 * job.progress))
        if context.workspace is not None:
            context.workspace.status_text_set(job.status_text())
        for area in context.screen.areas if context.screen else ():
            if area.type in {"PROPERTIES", "VIEW_3D"}:
                area.tag_redraw()

    def _close(self, context, job):
        # the bar's last value is the bake's own (every frame baked: 1000), not the last
        # tick's: the final frame can finish between two ticks
        context.window_manager.progress_update(int(1000 * job.progress))
        self._end(context)
        if job.stage == "stopped":
            if job.sim is None or not hasattr(job, "record"):
                self.report({"WARNING"}, "Snowfall: stopped before the first frame; nothing "
                            "was changed")
            else:
                self.report({"WARNING"}, f"Snowfall: stopped; frames {job.frame_start}-"
                            f"{job.frame} are kept (Resume continues)")
            return {"CANCELLED"}
        self.report({"INFO"}, f"Snowfall: baked frames {job.frame_start}-{job.frame}")
        return {"FINISHED"}

    def _end(self, context):
        BackgroundOperator._end(self, context)    # timer, progress bar, status bar
        for area in context.screen.areas if context.screen else ():
            if area.type in {"PROPERTIES", "VIEW_3D"}:
                area.tag_redraw()


class SNOWFALL_OT_bake(_BakeBase, bpy.types.Operator):
    """Simulate snowfall over the scene's frame range and store every frame (Esc stops)"""

    bl_idname = "snowfall.bake"
    bl_label = "Bake Snowfall"

    camera_only: bpy.props.BoolProperty(
        name="Only Flakes in Camera View",
        description="Write only the flakes the scene camera sees (plus a margin); every "
                    "flake is still simulated. Uses the camera as it is when the bake starts",
        default=False)
    camera_margin: bpy.props.FloatProperty(
        name="Camera Margin", description="Extra view kept on each side, as a share of the "
        "view's width and height", default=0.1, min=0.0, max=10.0)


class SNOWFALL_OT_resume(_BakeBase, bpy.types.Operator):
    """Continue a stopped bake from its last finished frame to the scene's end frame"""

    bl_idname = "snowfall.resume"
    bl_label = "Resume Bake"
    resume = True


class SNOWFALL_OT_free(bpy.types.Operator):
    """Remove the baked snow, flakes and resume state"""

    bl_idname = "snowfall.free"
    bl_label = "Free Bake"
    bl_options = {"REGISTER", "UNDO"}

    @classmethod
    def poll(cls, context):
        return context.scene is not None and running_job(context.scene) is None

    def execute(self, context):
        try:
            kept = ownership.free_bake(context.scene)
        except SnowInputError as error:          # a read-only folder: nothing was freed
            self.report({"ERROR"}, str(error))
            return {"CANCELLED"}
        for note in kept:
            self.report({"WARNING"}, f"Snowfall: {note}")
        return {"FINISHED"}


@bpy.app.handlers.persistent
def _stop_running_jobs(*_args):
    """Before another file loads (or the add-on goes): stop every bake, keeping its
    finished frames. A bake stepping on the simulation thread stops after its substep."""
    for job in list(_RUNNING.values()):
        background = getattr(job, "_background", None)
        if background is None:
            job.cancel()
            continue
        job.request_stop()
        if background.steps is not None:
            background.steps.wait()
            try:
                background.poll()
            except SnowInputError:
                pass
    _RUNNING.clear()


CLASSES = (SNOWFALL_OT_bake, SNOWFALL_OT_resume, SNOWFALL_OT_free)


def register():
    for cls in CLASSES:
        bpy.utils.register_class(cls)
    gn_flakes.register()
    if _stop_running_jobs not in bpy.app.handlers.load_pre:
        bpy.app.handlers.load_pre.append(_stop_running_jobs)


def unregister():
    gn_flakes.unregister()
    _stop_running_jobs()
    if _stop_running_jobs in bpy.app.handlers.load_pre:
        bpy.app.handlers.load_pre.remove(_stop_running_jobs)
    for cls in reversed(CLASSES):
        bpy.utils.unregister_class(cls)
