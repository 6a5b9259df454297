"""The wind field the viewport shows: the latest one Preview Wind or a running bake
published (no bpy here). Operators publish into ``ShownWind``; what draws it (the viewport
overlay, ``panels/wind_overlay.WindOverlay``, a layer above) registers itself as its
viewer, so operators never import panels.
"""
from __future__ import annotations

from ..snow_addon.wind_preview import WindPreviewStore


class ShownWind:
    """Class-level state: one shown wind field per Blender session (not a module global)."""

    store = WindPreviewStore()
    #: What draws the field, or None: an object with ``field_changed()`` (called after each
    #: publish) and ``wants_field(scene) -> bool``. The overlay sets itself here while it is
    #: registered.
    viewer = None

    @classmethod
    def publish(cls, wind_field, step_index: int = 0, time: float = 0.0,
                source: str = "") -> None:
        """Show ``wind_field`` (host arrays: ``Simulation.wind_field()``) from now on."""
        cls.store.publish(wind_field, step_index, time, source)
        if cls.viewer is not None:
            cls.viewer.field_changed()

    @classmethod
    def wants_field(cls, scene) -> bool:
        """True when a viewer draws the field, so a bake should publish its wind (each
        publish copies the field to the host)."""
        return cls.viewer is not None and bool(cls.viewer.wants_field(scene))
