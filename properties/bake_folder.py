"""Where a scene's bake lives on disk, and whether it can be resumed: what the panel needs
to show the Resume button without importing operators/ (plain paths and bake_cache's check;
nothing is created or written here).
"""
from __future__ import annotations

import os

import bpy

from ..snow_addon import bake_cache
from .groups import DEFAULT_CACHE_FOLDER


def scene_bake_folder(scene) -> str | None:
    """The absolute bake folder of ``scene`` (``<cache folder>/<scene>``), or None when the
    cache folder is relative to a .blend that is not saved yet."""
    raw = scene.snowfall.cache_folder.strip() or DEFAULT_CACHE_FOLDER
    if raw.startswith("//") and not bpy.data.filepath:
        return None
    return os.path.join(os.path.normpath(bpy.path.abspath(raw)), bpy.path.clean_name(scene.name))


def resume_available(scene) -> bool:
    """Whether Resume has something to continue: the scene's bake folder holds a committed
    frame short of the scene's end frame (whether or not the .blend was saved after it;
    after a crash, the folder is all there is). Cheap enough for a panel's draw."""
    folder = scene_bake_folder(scene)
    return folder is not None and bake_cache.resume_available(folder, scene.frame_end)
