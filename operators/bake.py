"""Bake and Resume: step the engine frame by frame and write each finished frame into
Blender (snow depth attributes, flake particles) and the resume state into the cache.

``BakeJob`` is plain Python: it validates everything before it changes anything, then
advances one simulation substep per ``advance()`` call, so a caller decides how much work
to do between UI events. The modal operator steps it from a timer (Blender stays
responsive; Esc stops after the current substep); ``execute`` (EXEC_DEFAULT, scripts,
farms, tests) runs it to the end synchronously.

Frames: the scene's first frame holds the initial state (no snow, flakes at their start
positions); every later frame is ``substeps`` steps of 1 / (fps x substeps) s after the
previous one. After each finished frame the engine state is saved atomically in the cache
folder, so Resume continues exactly where the bake stopped, even after Blender quit.
A bake's running state lives only in this module's ``_RUNNING`` table, never in the file.
"""
from __future__ import annotations

import hashlib
import json
import os
import tempfile
import time

import bpy
import numpy as np

from ..panels.wind_overlay import WindOverlay
from ..snow_addon.errors import SnowInputError
from ..snow_addon.settings import SnowSettings
from ..properties import DEFAULT_CACHE_FOLDER, terrain_objects, to_snow_settings, unit_scale
from . import particle_output, snow_output
from .scene_io import read_terrain, resolve_cache_folder

FLAKE_EMITTER_NAME = "Snowfall Flakes"
META_NAME = "bake.json"

#: scene pointer -> running BakeJob (runtime only; cleared on file load).
_RUNNING: dict = {}


def running_job(scene):
    return _RUNNING.get(scene.as_pointer())


def scene_cache_folder(cache_root: str, scene) -> str:
    return os.path.join(cache_root, bpy.path.clean_name(scene.name))


def flake_cache_folder(cache_folder: str, scene) -> str:
    """The particle cache folder: ``<cache folder>/<scene>/flakes/``, kept blend-relative
    ("//...") when the cache folder is, so it travels with the .blend."""
    raw = cache_folder.strip() or DEFAULT_CACHE_FOLDER
    scene_dir = bpy.path.clean_name(scene.name)
    if raw.startswith("//"):
        return raw.rstrip("/\\") + "/" + scene_dir + "/flakes/"
    return os.path.join(os.path.normpath(bpy.path.abspath(raw)), scene_dir, "flakes") + os.sep


def _fingerprint(settings: SnowSettings, terrain_digest: str, frame_start: int, substeps: int,
                 frame: int) -> str:
    """What the baked state of ``frame`` depends on: the settings (animated wind only up to
    that frame's time, so extending the scene's end frame keeps Resume possible), the
    terrain, the start frame and the substeps."""
    values = settings.to_dict()
    seconds = (frame - frame_start) * substeps * settings.time_step
    values["wind_keys"] = [k for k in settings.wind_keys if k[0] <= seconds + 1e-9]
    digest = hashlib.sha256()
    digest.update(json.dumps(values, sort_keys=True, default=str).encode())
    digest.update(json.dumps([int(frame_start), int(substeps), terrain_digest]).encode())
    return digest.hexdigest()


def _terrain_digest(vertices, triangles) -> str:
    digest = hashlib.sha256()
    digest.update(np.ascontiguousarray(vertices, dtype=np.float64).tobytes())
    digest.update(np.ascontiguousarray(triangles, dtype=np.int64).tobytes())
    return digest.hexdigest()


def _write_json_atomic(path: str, data: dict) -> None:
    folder = os.path.dirname(path)
    fd, tmp = tempfile.mkstemp(prefix=".tmp-", suffix=".json", dir=folder)
    try:
        with os.fdopen(fd, "w") as handle:
            json.dump(data, handle, indent=1)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def read_meta(folder: str):
    path = os.path.join(folder, META_NAME)
    if not os.path.exists(path):
        return None
    with open(path) as handle:
        return json.load(handle)


def free_cache(folder: str) -> None:
    """Remove this add-on's files from a scene cache folder (and the folder when empty)."""
    if not os.path.isdir(folder):
        return
    for name in os.listdir(folder):
        if name == META_NAME or (name.startswith("state_") and name.endswith(".npz")):
            os.unlink(os.path.join(folder, name))
    flakes = os.path.join(folder, "flakes")
    if os.path.isdir(flakes):
        # Blender may write the current frame back to a freed disk cache: clear the rest.
        for name in os.listdir(flakes):
            if name.endswith(".bphys"):
                os.unlink(os.path.join(flakes, name))
        if not os.listdir(flakes):
            os.rmdir(flakes)
    if not os.listdir(folder):
        os.rmdir(folder)


class BakeJob:
    """One bake (or resume) of ``context.scene``. Construction validates and raises
    SnowInputError before anything in the file or on disk changes."""

    def __init__(self, context, resume: bool = False, backend: str | None = None):
        from ..snow_addon.simulation import Simulation

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
        self.substeps = int(props.substeps)
        settings = to_snow_settings(props, scene, self.frame_start, self.frame_end)
        terrain = read_terrain(context, objects)
        self.parts = terrain.parts
        vertices, triangles = terrain.vertices, terrain.triangles
        self.cache = scene_cache_folder(cache_root, scene)
        self.settings = settings
        self.terrain_digest = _terrain_digest(vertices, triangles)
        state_path = None
        if resume:
            if not props.has_bake:
                raise SnowInputError("bake", "there is no bake to resume", "Bake")
            meta = read_meta(self.cache)
            if meta is None:
                raise SnowInputError("cache_folder", f"no resume state in '{self.cache}'",
                                     "baking again (the cache folder was moved or freed)")
            if meta.get("fingerprint") != self.fingerprint(props.baked_frame_end):
                raise SnowInputError("bake", "the settings, frame range start or terrain "
                                     "changed since the bake", "restoring them, or baking again")
            if meta.get("frame") != props.baked_frame_end:
                raise SnowInputError("cache_folder", f"the cache holds frame {meta.get('frame')}"
                                     f" but the file's bake ends at frame "
                                     f"{props.baked_frame_end}", "baking again")
            if props.baked_frame_end >= self.frame_end:
                raise SnowInputError("frame_end", f"the bake already reaches frame "
                                     f"{props.baked_frame_end}",
                                     "a later scene end frame to bake more")
            state_path = os.path.join(self.cache, meta["state"])
            if not os.path.exists(state_path):
                raise SnowInputError("cache_folder", f"'{state_path}' is missing", "baking again")
        elif self.frame_start < 1:
            raise SnowInputError("frame_start", f"the scene starts at frame {self.frame_start}; "
                                 "particle caches start at frame 1", "a start frame of 1 or more")
        elif self.frame_end < self.frame_start:
            raise SnowInputError("frame_end", "the scene's end frame is before its start",
                                 "an end frame after the start frame")

        self.sim = Simulation(settings, vertices, triangles,
                              backend=backend if backend is not None else props.backend)
        if state_path is not None:
            self.sim.load_state(state_path)
            expected = (props.baked_frame_end - self.frame_start) * self.substeps
            if self.sim.step_index != expected:
                raise SnowInputError("cache_folder", "the resume state does not match the "
                                     "baked frames", "baking again")

        if resume and props.flake_emitter is None:
            raise SnowInputError("flake_emitter", "the flake emitter was deleted", "baking again")

        # --- from here on the file and the cache change -----------------------------------
        self.scale = unit_scale(scene)
        if resume:
            self.frame = props.baked_frame_end
            for part in self.parts:
                snow_output.remove_frames_after(part.obj, self.frame)
            self.emitter = props.flake_emitter
        else:
            free_bake(scene)
            os.makedirs(self.cache, exist_ok=True)
            self.frame = self.frame_start
            self.emitter = particle_output.ensure_flake_system(
                scene, FLAKE_EMITTER_NAME, settings.flake_count,
                flake_size=float(props.flake_size),
                cache_dir=flake_cache_folder(props.cache_folder, scene))
            props.flake_emitter = self.emitter
            for part in self.parts:
                snow_output.ensure_snow_modifier(part.obj, self.scale)
            props.baked_frame_start = self.frame_start
        props.backend_used = self.sim.backend.name
        props.backend_reason = self.sim.backend.reason
        self._respawns = self.sim.flake_respawn_counts()
        self.substep = 0
        self.frames_done = 0
        self.frames_total = self.frame_end - self.frame
        self.started = time.perf_counter()
        self.cancelled = False
        self.finished = False
        if not resume:
            self._write_frame(self.frame_start, first=True)

    def fingerprint(self, frame: int) -> str:
        return _fingerprint(self.settings, self.terrain_digest, self.frame_start, self.substeps,
                            frame)

    # --- progress ---------------------------------------------------------------------------
    @property
    def done(self) -> bool:
        return self.finished or self.cancelled or self.frame >= self.frame_end

    @property
    def progress(self) -> float:
        if self.frames_total <= 0:
            return 1.0
        return (self.frames_done + self.substep / self.substeps) / self.frames_total

    @property
    def seconds_per_frame(self):
        if self.frames_done == 0:
            return None
        return (time.perf_counter() - self.started) / self.frames_done

    @property
    def eta_seconds(self):
        per_frame = self.seconds_per_frame
        if per_frame is None:
            return None
        return per_frame * (self.frames_total - self.frames_done - self.substep / self.substeps)

    def status_text(self) -> str:
        text = (f"Snowfall: frame {self.frame}/{self.frame_end} "
                f"({100.0 * self.progress:.0f}%) on {self.sim.backend.name}")
        eta = self.eta_seconds
        if eta is not None:
            text += f", {self.seconds_per_frame:.2f} s/frame, ETA {_format_seconds(eta)}"
        return text + "  (Esc to stop)"

    # --- stepping ----------------------------------------------------------------------------
    def advance(self) -> bool:
        """One substep; writes the frame when its last substep is done. False when the
        bake is complete (or stopped)."""
        if self.done:
            return False
        self.sim.step(1)
        self.substep += 1
        if self.substep == self.substeps:
            self.substep = 0
            self._write_frame(self.frame + 1)
        return not self.done

    def advance_frame(self) -> bool:
        """Substeps up to the end of the next frame."""
        while True:
            more = self.advance()
            if not more or self.substep == 0:
                return more

    def run(self) -> None:
        while self.advance():
            pass
        self.finish()

    def _write_frame(self, frame: int, first: bool = False) -> None:
        sim = self.sim
        depth = sim.snow_depth()
        for part in self.parts:
            snow_output.write_snow_frame(part.obj, frame,
                                         _vertex_depth(sim, depth, part.vertices))
        respawns = sim.flake_respawn_counts()
        respawned = respawns != self._respawns
        self._respawns = respawns
        particle_output.write_flake_frame(
            self.emitter, frame, sim.flake_positions() / np.float32(self.scale),
            sim.flake_velocities() / np.float32(self.scale), respawned)
        # Resume state, then the pointer to it: a crash between leaves the old pair intact.
        state_name = f"state_{frame}.npz"
        sim.save_state(os.path.join(self.cache, state_name))
        meta = read_meta(self.cache) if not first else None
        _write_json_atomic(os.path.join(self.cache, META_NAME),
                           {"frame": frame, "state": state_name,
                            "fingerprint": self.fingerprint(frame),
                            "frame_start": self.frame_start, "substeps": self.substeps})
        if meta is not None and meta.get("state") not in (None, state_name):
            old = os.path.join(self.cache, meta["state"])
            if os.path.exists(old):
                os.unlink(old)
        props = self.scene.snowfall
        props.baked_frame_end = frame
        props.has_bake = True
        for part in self.parts:
            snow_output.set_baked_range(part.obj, self.frame_start, frame)
        if not first:
            self.frame = frame
            self.frames_done += 1
            props.seconds_per_frame = self.seconds_per_frame or 0.0
        if WindOverlay.wants_field(self.scene):  # the viewport shows the wind while baking
            WindOverlay.publish(sim.wind_field(), sim.step_index, sim.time, source="bake")

    def finish(self) -> None:
        """Close the bake: every finished frame stays; the particle cache is marked baked."""
        if self.finished:
            return
        self.finished = True
        particle_output.finish_flake_bake(self.emitter, self.frame_start, self.frame)
        _RUNNING.pop(self.scene.as_pointer(), None)

    def cancel(self) -> None:
        """Stop after the current substep, keeping every finished frame."""
        self.cancelled = True
        self.finish()


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


def free_bake(scene) -> None:
    """Remove the baked snow, flakes and resume state of ``scene``."""
    props = scene.snowfall
    for obj in terrain_objects(props):
        snow_output.free_snow(obj)
    emitter = props.flake_emitter
    if emitter is not None:
        particle_output.free_flake_bake(emitter)
        props.flake_emitter = None
        mesh = emitter.data
        bpy.data.objects.remove(emitter)
        if mesh is not None and mesh.users == 0:
            bpy.data.meshes.remove(mesh)
    try:
        folder = scene_cache_folder(resolve_cache_folder(props), scene)
    except SnowInputError:
        folder = None
    if folder is not None:
        free_cache(folder)
    props.has_bake = False
    props.baked_frame_start = 0
    props.baked_frame_end = 0


class _BakeBase:
    bl_options = {"REGISTER"}
    resume = False
    #: Wall time the modal operator spends stepping per timer event (seconds).
    budget_seconds = 0.1

    @classmethod
    def poll(cls, context):
        return context.scene is not None and running_job(context.scene) is None

    def _start(self, context):
        try:
            return BakeJob(context, resume=self.resume)
        except SnowInputError as error:
            self.report({"ERROR"}, str(error))
            return None

    def execute(self, context):
        job = self._start(context)
        if job is None:
            return {"CANCELLED"}
        _RUNNING[context.scene.as_pointer()] = job
        try:
            job.run()
        finally:
            job.finish()
        self.report({"INFO"}, f"Snowfall: baked frames {job.frame_start}-{job.frame}")
        return {"FINISHED"}

    def invoke(self, context, _event):
        job = self._start(context)
        if job is None:
            return {"CANCELLED"}
        _RUNNING[context.scene.as_pointer()] = job
        self._job = job
        wm = context.window_manager
        self._timer = wm.event_timer_add(0.01, window=context.window)
        wm.modal_handler_add(self)
        wm.progress_begin(0, 1000)
        return {"RUNNING_MODAL"}

    def modal(self, context, event):
        job = self._job
        if event.type in {"ESC", "RIGHTMOUSE"} and event.value == "PRESS":
            job.cancel()
            self._end(context)
            self.report({"WARNING"}, f"Snowfall: stopped; frames {job.frame_start}-{job.frame}"
                        " are kept (Resume continues)")
            return {"CANCELLED"}
        if event.type != "TIMER":
            return {"PASS_THROUGH"}
        deadline = time.perf_counter() + self.budget_seconds
        try:
            while job.advance() and time.perf_counter() < deadline:
                pass
        except Exception:
            job.cancel()
            self._end(context)
            raise
        context.window_manager.progress_update(int(1000 * job.progress))
        if context.workspace is not None:
            context.workspace.status_text_set(job.status_text())
        for area in context.screen.areas if context.screen else ():
            if area.type in {"PROPERTIES", "VIEW_3D"}:
                area.tag_redraw()
        if job.done:
            job.finish()
            self._end(context)
            self.report({"INFO"}, f"Snowfall: baked frames {job.frame_start}-{job.frame}")
            return {"FINISHED"}
        return {"RUNNING_MODAL"}

    def _end(self, context):
        wm = context.window_manager
        wm.event_timer_remove(self._timer)
        wm.progress_end()
        if context.workspace is not None:
            context.workspace.status_text_set(None)


class SNOWFALL_OT_bake(_BakeBase, bpy.types.Operator):
    """Simulate snowfall over the scene's frame range and store every frame (Esc stops)"""

    bl_idname = "snowfall.bake"
    bl_label = "Bake Snowfall"


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
        free_bake(context.scene)
        return {"FINISHED"}


@bpy.app.handlers.persistent
def _stop_running_jobs(*_args):
    for job in list(_RUNNING.values()):
        job.cancel()
    _RUNNING.clear()


CLASSES = (SNOWFALL_OT_bake, SNOWFALL_OT_resume, SNOWFALL_OT_free)


def register():
    for cls in CLASSES:
        bpy.utils.register_class(cls)
    if _stop_running_jobs not in bpy.app.handlers.load_pre:
        bpy.app.handlers.load_pre.append(_stop_running_jobs)


def unregister():
    _stop_running_jobs()
    if _stop_running_jobs in bpy.app.handlers.load_pre:
        bpy.app.handlers.load_pre.remove(_stop_running_jobs)
    for cls in reversed(CLASSES):
        bpy.utils.unregister_class(cls)
