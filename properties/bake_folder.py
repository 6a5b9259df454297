"""Where a scene's bake lives on disk, and whether it can be resumed: what the panel needs
to show the Resume button without importing operators/ (plain paths and bake_cache's check;
nothing is created or written here).
"""
from __future__ import annotations

import os

import bpy

from ..snow_addon import bake_cache


def cache_folder_setting(scene) -> str:
    """The cache folder of ``scene`` as the .blend names it (``//``-relative or absolute):
    the Cache Folder setting, or when that is empty (the default), the .blend's own folder
    ``//blendcache_<blend name>/snowfall`` (Blender's convention for point caches), so that
    two .blend files saved in one folder never share a bake."""
    raw = scene.snowfall.cache_folder.strip()
    if raw:
        return raw
    stem = os.path.splitext(os.path.basename(bpy.data.filepath))[0] or "untitled"
    return f"//blendcache_{stem}/snowfall"


def scene_bake_folder(scene) -> str | None:
    """The absolute bake folder of ``scene`` (``<cache folder>/<scene>``), or None when the
    cache folder is relative to a .blend that is not saved yet."""
    raw = cache_folder_setting(scene)
    if raw.startswith("//") and not bpy.data.filepath:
        return None
    return os.path.join(os.path.normpath(bpy.path.abspath(raw)), bpy.path.clean_name(scene.name))


#: (bake.json path, its stat, owner id, blend path, by setting) -> owner_status, so that a
#: panel's draw reads bake.json only when it or the file changed.
_OWNER_SEEN: dict = {}


def folder_owner(scene, folder: str | None = None):
    """(status, owner) of the scene's bake folder for this .blend
    (``bake_cache.owner_status``; ("none", None) for a file not saved yet). Cheap enough
    for a panel's draw: one stat, and a json read only when bake.json changed."""
    folder = scene_bake_folder(scene) if folder is None else folder
    if folder is None:
        return "none", None
    meta = os.path.join(folder, bake_cache.META_NAME)
    try:
        stat = os.stat(meta)
    except OSError:
        return "none", None
    own = scene_bake_folder(scene)
    key = (meta, stat.st_ino, stat.st_mtime_ns, stat.st_size, scene.snowfall.bake_owner,
           bpy.data.filepath, own is not None and os.path.normpath(own) == os.path.normpath(folder))
    seen = _OWNER_SEEN.get(meta)
    if seen is None or seen[0] != key:
        seen = (key, bake_cache.owner_status(folder, key[4], key[5], key[6]))
        if len(_OWNER_SEEN) > 64:
            _OWNER_SEEN.clear()
        _OWNER_SEEN[meta] = seen
    return seen[1]


def resume_available(scene) -> bool:
    """Whether Resume has something to continue: the scene's bake folder holds a committed
    frame short of the scene's end frame (whether or not the .blend was saved after it;
    after a crash, the folder is all there is), and the bake is this file's (not the
    original's folder of a copy, nor another file's sharing the folder). Cheap enough for
    a panel's draw."""
    folder = scene_bake_folder(scene)
    return folder is not None and bake_cache.resume_available(folder, scene.frame_end) and \
        bake_cache.is_own(folder_owner(scene, folder)[0])
