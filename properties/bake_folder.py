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


def resume_available(scene) -> bool:
    """Whether Resume has something to continue: the scene's bake folder holds a committed
    frame short of the scene's end frame (whether or not the .blend was saved after it;
    after a crash, the folder is all there is). Cheap enough for a panel's draw."""
    folder = scene_bake_folder(scene)
    return folder is not None and bake_cache.resume_available(folder, scene.frame_end)
