"""Which .blend file a bake folder belongs to, and what Bake, Resume and Free may touch.

Every bake folder's ``bake.json`` records its owner (``bake_cache.owner_record``): the id
kept in the .blend (``Scene.snowfall.bake_owner``, a random UUID made at the first bake),
the .blend's path and that path relative to the folder. ``bake_cache.owner_status`` reads
it. The rules:

- Bake and Resume write only into a folder of this file's (its own, one it made before it
  was moved or renamed, a bake made before owners were recorded in the folder its Cache
  Folder setting names, or a folder with no bake); a folder of another file's is refused
  before anything changes, naming that file, with Take Over (``snowfall.take_over_bake``)
  as the deliberate way to make it this file's.
- Free removes the bake from the .blend, and deletes only the files of this file's bakes:
  a copy made by Save As (whose flake emitter still points at the original's folder while
  its default cache folder follows the new name), a copy made on disk, or a second file
  sharing an explicit cache folder never deletes the original's files.
- A .blend that lost its bake record (killed while saving, an older copy) picks its bake
  up again from the folder when it is opened (``adopt_lost_bakes``, a load_post handler)
  or on Resume (``operators/bake.py``).
"""
from __future__ import annotations

import contextlib
import os
import uuid
from dataclasses import dataclass, field

import bpy

from ..snow_addon import bake_cache
from ..snow_addon.bake_cache import BakeCacheError, BakeFolder
from ..snow_addon.errors import SnowInputError
from ..snow_addon.formats import gn_bake
from ..properties import scene_bake_folder, terrain_objects
from . import gn_flakes, particle_output, snow_output, snow_surface
from .scene_io import flake_cache_folder, read_terrain, scene_fences

#: Scenes (pointers) whose bake ``adopt_lost_bakes`` picked up from the folder since the
#: file was opened: a Resume of such a complete bake finishes (the file then shows it)
#: instead of answering "the bake already reaches".
_ADOPTED: set = set()


def owner_id(scene, create: bool = False) -> str:
    """The id of ``scene``'s bakes in this .blend ("" when it never baked, unless
    ``create``)."""
    props = scene.snowfall
    if not props.bake_owner and create:
        props.bake_owner = uuid.uuid4().hex
    return props.bake_owner


#: The .blend a headless bake writes its result to (``--output``), while it bakes: its
#: bakes are that file's (``baking_for``). Empty: the session's own file.
_TARGETS: list = []


def blend_identity() -> str:
    """The .blend whose bakes this session makes: the headless ``--output`` while one bakes
    for it, else the open file."""
    return _TARGETS[-1] if _TARGETS else bpy.data.filepath


@contextlib.contextmanager
def baking_for(path: str):
    """Bake (and check folders) as the .blend ``path``, which the result is saved to: a
    headless ``--output`` run again after a kill resumes the bake that file owns."""
    _TARGETS.append(os.path.abspath(path))
    try:
        yield
    finally:
        _TARGETS.pop()


def owner_record(scene, folder: str) -> dict:
    """bake.json's owner entry for a bake of ``scene`` in ``folder`` (makes the id). The
    folder counts as baked since the file was last saved (``saved_as``)."""
    _UNSAVED[os.path.normpath(folder)] = scene.name
    return bake_cache.owner_record(owner_id(scene, create=True), blend_identity(), folder)


#: Bake folders written (baked, resumed, claimed) in this session since its .blend was last
#: saved: folder -> scene name. Only the file saved next records these bakes.
_UNSAVED: dict = {}


def saved_as(path: str) -> None:
    """The session's .blend was saved as ``path``: the bakes written since the last save
    are recorded in that file only (the file they were made in never saw them, or they
    were made before the file had a name), so their folders now belong to ``path``. A Save
    As of a file whose bake was saved in it before moves nothing (the copy is a copy).
    Called on every save of the session's file (save_post); a command that writes the file
    as a copy and moves it into place (the headless ``--output``) calls it with the final
    path."""
    path = os.path.abspath(path)
    for folder, scene_name in list(_UNSAVED.items()):
        scene = bpy.data.scenes.get(scene_name)
        bake = BakeFolder(folder)
        if scene is None or not bake.exists():
            continue
        try:
            meta = bake.read_meta()
            owner = meta.get(bake_cache.OWNER_KEY) or {}
            if owner.get("blend") != path:
                bake.set_owner(bake_cache.owner_record(owner_id(scene, create=True), path,
                                                       folder))
        except (SnowInputError, OSError) as error:
            print(f"Snowfall: could not record '{path}' as the owner of '{folder}' ({error})")
    _UNSAVED.clear()


@bpy.app.handlers.persistent
def _after_save(path="", *_args) -> None:
    """save_post: a save of the session's file (not a copy: a copy leaves
    ``bpy.data.filepath`` as it was) records its unsaved bakes (``saved_as``)."""
    if not isinstance(path, str) or not path:     # a Blender that passes no path
        path = bpy.data.filepath
    if path and bpy.data.filepath and os.path.normcase(os.path.abspath(path)) == \
            os.path.normcase(os.path.abspath(bpy.data.filepath)):
        saved_as(path)


def _same(a, b) -> bool:
    return bool(a) and bool(b) and os.path.normcase(os.path.normpath(a)) == \
        os.path.normcase(os.path.normpath(b))


def status(scene, folder: str):
    """(status, owner) of ``folder`` for this file (``bake_cache.owner_status``)."""
    return bake_cache.owner_status(folder, owner_id(scene), blend_identity(),
                                   by_setting=_same(folder, scene_bake_folder(scene)))


def foreign_error(folder: str, owner) -> BakeCacheError:
    return BakeCacheError(
        f"the bake folder '{folder}' holds the bake of {bake_cache.describe_owner(owner)}, "
        "not of this file; its files are kept",
        "another Cache Folder for this file, or Take Over Bake (snowfall.take_over_bake) "
        "to make that bake this file's: Bake then replaces it, Free deletes it", os.path.join(folder, bake_cache.META_NAME))


def check_writable_by(scene, folder: str) -> str:
    """Raise BakeCacheError (nothing changed) when ``folder`` holds another file's bake;
    returns its status."""
    state, owner = status(scene, folder)
    if not bake_cache.is_own(state) and state != "unreadable":
        raise foreign_error(folder, owner)
    return state


def claim(scene, folder: str) -> None:
    """Record this file as the owner of the bake in ``folder`` (Resume of a bake made
    before owners were recorded, or by this file under another name; Take Over)."""
    bake = BakeFolder(folder)
    if bake.exists():
        bake.set_owner(owner_record(scene, folder))


# --- Free ------------------------------------------------------------------------------------

@dataclass
class FreePlan:
    """What Free deletes: the bake folders of this file's (``folders``), whether the flake
    emitter's files are among them (``emitter_files``), and a note per folder of another
    file's that it keeps."""
    folders: list = field(default_factory=list)
    emitter_files: bool = False
    kept: list = field(default_factory=list)


def emitter_folder(emitter):
    """The bake folder (``<cache>/<scene>``) the flake emitter reads, or None."""
    if emitter is None:
        return None
    try:
        flakes = particle_output.cache_directory(emitter)
    except (KeyError, AttributeError):
        return None
    flakes = os.path.normpath(flakes)
    if os.path.basename(flakes) != bake_cache.FLAKE_DIR:
        return None
    return os.path.dirname(flakes)


def plan_free(scene) -> FreePlan:
    """What Free may delete for ``scene``; BakeCacheError (naming the folder, nothing
    changed) when a folder of this file's bake cannot be changed (read-only)."""
    plan = FreePlan()
    own_folder = scene_bake_folder(scene)
    flakes_at = emitter_folder(scene.snowfall.flake_emitter)
    candidates = [folder for folder in (own_folder, flakes_at) if folder]
    if len(candidates) == 2 and _same(*candidates):
        candidates = candidates[:1]
    for folder in candidates:
        state, owner = status(scene, folder)
        if state == "none" and not _same(folder, own_folder):
            continue            # not a Snowfall bake folder: nothing of it is deleted
        if bake_cache.is_own(state) or state == "unreadable":
            BakeFolder(folder).check_writable() if os.path.isdir(folder) else None
            plan.folders.append(folder)
            plan.emitter_files |= _same(folder, flakes_at)
        else:
            plan.kept.append(f"the bake in '{folder}' belongs to "
                             f"{bake_cache.describe_owner(owner)}: its files are kept")
    return plan


def free_bake(scene) -> list:
    """Remove the baked snow, flakes and resume state of ``scene`` from the .blend, and the
    files of this file's own bake from disk; the files of another file's bake (a Save As
    copy's flakes still read the original's folder; a folder shared with another file) are
    kept (plan_free). Returns a note per folder kept. BakeCacheError, before
    anything changes, when a folder of this file's bake cannot be changed (read-only)."""
    props = scene.snowfall
    plan = plan_free(scene)
    for obj in terrain_objects(props):
        snow_output.free_snow(obj)       # per-frame attributes (also of older bakes)
    snow_surface.free_surface()
    emitter = props.flake_emitter
    if emitter is not None:
        if plan.emitter_files:
            particle_output.free_flake_bake(emitter)
        props.flake_emitter = None
        mesh = emitter.data
        bpy.data.objects.remove(emitter)
        if mesh is not None and mesh.users == 0:
            bpy.data.meshes.remove(mesh)
    for folder in plan.folders:
        # A Geometry Nodes flake bake's meta/ and blobs/ (also without its object).
        gn_bake.free(os.path.join(folder, bake_cache.FLAKE_DIR))
        BakeFolder(folder).free()   # this add-on's files, and the folder when empty
    props.has_bake = False
    props.baked_frame_start = 0
    props.baked_frame_end = 0
    return plan.kept


# --- before a bake changes anything ----------------------------------------------------------

def check_bake(job, context, vertex_frames: bool) -> None:
    """Called by ``BakeJob`` before it changes the file or the disk: the folder must be
    this file's and writable, a new bake must be able to free the old one, a bake in the
    per-vertex snow form (a resumed bake's own form; ``vertex_frames`` for a new one:
    BakeJob's argument) needs a terrain whose modifiers keep its vertex count, and the
    disk must have room for the bake. Raises SnowInputError (nothing changed)."""
    scene = job.scene
    check_writable_by(scene, job.cache)
    job.folder.check_writable()
    if job.resume:
        vertex = _folder_vertex_frames(job.folder)
    else:
        plan_free(scene)
        vertex = bool(vertex_frames)
        _check_disk_space(job)
    if vertex:
        for part in job.parts:
            if len(part.vertices) != len(part.obj.data.vertices):
                raise SnowInputError(
                    "terrain", f"the modifiers of '{part.obj.name}' change its vertex count "
                    f"({len(part.obj.data.vertices)} -> {len(part.vertices)}), and this bake "
                    "stores its snow on the terrain's own vertices (the older per-vertex form)",
                    "applying those modifiers (Ctrl+A > All Modifiers) first, or a new Bake "
                    "(it shows the snow as a surface of its own)")


def _folder_vertex_frames(folder: BakeFolder) -> bool:
    try:
        return bool(folder.read_meta()["snow"].get("vertex_frames", True))
    except (BakeCacheError, KeyError, TypeError, AttributeError):
        return False


def _check_disk_space(job) -> None:
    """Refuse a bake whose files cannot fit on the disk (estimated from its sizes: flakes
    at most 16 B per flake-frame, snow depth at most 12 B per node-frame, two checkpoints).
    Nothing is refused when the free space cannot be read."""
    from .estimates import bake_disk_bytes

    needed = bake_disk_bytes(job.settings, job.frame_end - job.frame_start + 1,
                             [part.vertices for part in job.parts])
    probe = job.cache
    while not os.path.isdir(probe) and os.path.dirname(probe) != probe:
        probe = os.path.dirname(probe)
    free = bake_cache.free_space(probe)
    if free is None:
        return
    old = sum(_size(path) for path in BakeFolder(job.cache).files())
    if needed > free + old:
        raise SnowInputError(
            "cache_folder", f"the bake needs about {bake_cache.format_bytes(needed)} on disk "
            f"for frames {job.frame_start}-{job.frame_end}, and '{probe}' has "
            f"{bake_cache.format_bytes(free + old)} free (the old bake's files included)",
            "freeing disk space, a cache folder on a larger disk, fewer flakes or frames")


def _size(path) -> int:
    try:
        return os.path.getsize(path)
    except OSError:
        return 0


def start_folder(job) -> None:
    """Begin a new bake's folder (``BakeFolder.start``: bake.json with this file as its
    owner). A full disk or a folder that turned read-only ends the start with a message
    naming the file, and the new bake is taken back out of the .blend (nothing half made)."""
    try:
        job.folder.start(job._meta())
    except BakeCacheError:
        _undo_start(job)
        raise


def write_info_file(job, flake_count: int) -> None:
    """The flake cache's info file, written while a bake starts: a full disk or a folder
    that turned read-only ends the start with a message naming the file, and the new bake
    is taken back out of the .blend and the folder (nothing half made)."""
    try:
        particle_output.ensure_info_file(job.emitter, flake_count)
    except OSError as error:
        failure = bake_cache.disk_error(error, job.cache, "the bake did not start")
        if not job.resume:
            _undo_start(job)
        raise failure from None


def _undo_start(job) -> None:
    """Take a bake that failed to start back out: the flake emitter it made, its snow
    display, the files it wrote (a fresh bake: the bake before it was already freed)."""
    props = job.scene.snowfall
    if props.flake_emitter is None and getattr(job, "emitter", None) is not None:
        props.flake_emitter = job.emitter
    try:
        free_bake(job.scene)
    except (SnowInputError, OSError) as error:
        print(f"Snowfall: could not take the bake that failed to start back out ({error})")


# --- a .blend that lost its bake record ------------------------------------------------------

def shows_bake(scene, folder: str) -> bool:
    """Whether the .blend shows the bake of ``folder`` (its record and flake emitter)."""
    props = scene.snowfall
    emitter = props.flake_emitter
    if not props.has_bake or emitter is None or emitter.name not in scene.objects:
        return False
    return _same(emitter_folder(emitter), folder)


def adopted(scene) -> bool:
    return scene.as_pointer() in _ADOPTED


def matching_bake(context, scene):
    """(folder, meta, record) of the bake in ``scene``'s folder when it is this file's and
    was made from the scene as it is (scene, first frame, substeps, terrain, fences and
    settings), else None. Reads the terrain (no simulation)."""
    from ..properties import to_snow_settings

    folder = scene_bake_folder(scene)
    if folder is None:
        return None
    bake = BakeFolder(folder)
    state, _owner = status(scene, folder)
    if not bake.exists() or not bake_cache.is_own(state):
        return None
    try:
        meta = bake.read_meta()
        record = bake.read_progress()
    except BakeCacheError:
        return None
    if record is None or record.frame is None or meta.get("scene") != scene.name \
            or meta.get("frame_start") != scene.frame_start \
            or meta.get("substeps") != int(scene.snowfall.substeps):
        return None
    objects = terrain_objects(scene.snowfall)
    if not objects:
        return None
    try:
        terrain = read_terrain(context, objects)
        digest = bake_cache.terrain_digest(terrain.vertices, terrain.triangles,
                                           scene_fences(context, objects))
        settings = to_snow_settings(scene.snowfall, scene, scene.frame_start, scene.frame_end)
    except SnowInputError:
        return None
    if meta.get("terrain_sha256") != digest or record.fingerprint != bake_cache.fingerprint(
            settings, digest, scene.frame_start, int(scene.snowfall.substeps), record.frame):
        return None
    return folder, meta, record


def show_folder_bake(scene, folder: str, meta: dict, record) -> int | None:
    """Rebuild Blender's side of the bake in ``folder`` (flake emitter, snow surface, the
    baked range) from its files, without simulating; returns the last frame shown, or None
    when nothing can be shown this way (a bake in the older per-vertex form: Resume)."""
    from ..snow_addon.formats.frame_store import GN_BAKE, PTCACHE
    from ..properties import cache_folder_setting, unit_scale
    from ..snow_addon.grid import HeightmapGrid

    props = scene.snowfall
    snow = meta.get("snow") or {}
    flakes = meta.get("flakes") or {}
    if snow.get("vertex_frames", True):
        return None
    first = int(meta["frame_start"])
    last = first - 1
    while last + 1 in record.flakes and last + 1 in record.snow and last + 1 <= record.complete:
        last += 1
    if last < first:
        return None
    cache_dir = flake_cache_folder(props.cache_folder, scene)
    if flakes.get("format", PTCACHE) == GN_BAKE:
        emitter = gn_flakes.ensure_flakes(scene, particle_output.FLAKE_EMITTER_NAME,
                                          cache_dir, flake_size=float(props.flake_size))
    else:
        emitter = particle_output.ensure_flake_system(
            scene, particle_output.FLAKE_EMITTER_NAME, int(flakes["count"]),
            flake_size=float(props.flake_size), cache_dir=cache_dir)
        particle_output.ensure_info_file(emitter, int(flakes["count"]))
    grid = HeightmapGrid(float(snow["x0"]), float(snow["y0"]), float(snow["spacing"]),
                         int(snow["nx"]), int(snow["ny"]))
    surface = snow_surface.ensure_surface(
        scene, snow_surface.snow_folder_for_blend(cache_folder_setting(scene), scene), grid,
        1.0 / unit_scale(scene), first, first)
    snow_surface.set_range(surface, first, last)
    particle_output.finish_flake_bake(emitter, first, last)
    props.flake_emitter = emitter
    props.baked_frame_start = first
    props.baked_frame_end = last
    props.has_bake = True
    return last


@bpy.app.handlers.persistent
def adopt_lost_bakes(*_args) -> None:
    """load_post: each scene whose .blend shows no bake, while its folder holds a bake of
    this file's made from the scene as it is, shows that bake again (a .blend killed while
    saving, or an older copy of it). Errors leave the scene as it was opened."""
    _ADOPTED.clear()
    _UNSAVED.clear()                   # bakes of the file closed stay that file's
    scene = bpy.context.scene          # the scene the file opens with (the Bake's scene)
    if scene is None or scene.library is not None or not hasattr(scene, "snowfall"):
        return
    folder = scene_bake_folder(scene)
    if folder is None or shows_bake(scene, folder) or not terrain_objects(scene.snowfall) \
            or not os.path.isfile(os.path.join(folder, bake_cache.PROGRESS_NAME)):
        return
    try:
        found = matching_bake(bpy.context, scene)
        if found is not None and show_folder_bake(scene, *found) is not None:
            _ADOPTED.add(scene.as_pointer())
            print(f"Snowfall: the .blend had lost its bake record; the bake in '{folder}' "
                  f"(frames {scene.snowfall.baked_frame_start}-"
                  f"{scene.snowfall.baked_frame_end}) is shown again")
    except (SnowInputError, OSError, KeyError, TypeError, ValueError, RuntimeError) as error:
        print(f"Snowfall: the bake in '{folder}' was not picked up ({error})")


# --- Take Over -------------------------------------------------------------------------------

class SNOWFALL_OT_take_over_bake(bpy.types.Operator):
    """Make the bake in this scene's cache folder this file's, though another .blend made it
    (a copy, or another file sharing the folder): Bake then replaces it and Free deletes it"""

    bl_idname = "snowfall.take_over_bake"
    bl_label = "Take Over Bake"
    bl_options = {"REGISTER"}

    @classmethod
    def poll(cls, context):
        return context.scene is not None

    def execute(self, context):
        scene = context.scene
        folder = scene_bake_folder(scene)
        if folder is None:
            self.report({"ERROR"}, "cache_folder: the .blend is not saved, and the cache "
                        "folder is relative to it (try saving the file first)")
            return {"CANCELLED"}
        state, owner = status(scene, folder)
        if state in ("none",):
            self.report({"INFO"}, f"Snowfall: '{folder}' holds no bake; nothing to take over")
            return {"CANCELLED"}
        try:
            claim(scene, folder)
        except SnowInputError as error:
            self.report({"ERROR"}, str(error))
            return {"CANCELLED"}
        before = bake_cache.describe_owner(owner) if state == "foreign" else "this file"
        self.report({"INFO"}, f"Snowfall: the bake in '{folder}' (made by {before}) now "
                    "belongs to this file")
        return {"FINISHED"}


CLASSES = (SNOWFALL_OT_take_over_bake,)


def register():
    for cls in CLASSES:
        bpy.utils.register_class(cls)
    if adopt_lost_bakes not in bpy.app.handlers.load_post:
        bpy.app.handlers.load_post.append(adopt_lost_bakes)
    if _after_save not in bpy.app.handlers.save_post:
        bpy.app.handlers.save_post.append(_after_save)
    if isinstance(bpy.data, bpy.types.BlendData) and bpy.data.filepath:
        adopt_lost_bakes()             # a file opened before registering (headless bake)


def unregister():
    while adopt_lost_bakes in bpy.app.handlers.load_post:
        bpy.app.handlers.load_post.remove(adopt_lost_bakes)
    while _after_save in bpy.app.handlers.save_post:
        bpy.app.handlers.save_post.remove(_after_save)
    for cls in reversed(CLASSES):
        bpy.utils.unregister_class(cls)
