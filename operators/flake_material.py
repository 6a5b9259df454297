"""The flakes' material, shared by both flake forms (the particle system of
operators/particle_output.py and the Geometry Nodes bake of operators/gn_flakes.py) and by
Set Up Render (operators/render_setup.py)."""
from __future__ import annotations

import bpy

from ..blender_compat import node_tree

FLAKE_MATERIAL_NAME = "SnowfallFlake"

#: Share of the flake's light that passes through it (Translucent BSDF) rather than being
#: scattered back (Principled): a thin, lacy flake lit from behind glows.
FLAKE_TRANSLUCENCY = 0.35
#: Exponent on the Layer Weight "Facing" output that fades a flake to transparent toward
#: its rim (1: linear from the centre); with Cycles' motion blur a flake renders as a soft
#: white disc or streak, not a hard-edged bead.
FLAKE_EDGE_SOFTNESS = 3.0


def ensure_flake_material(flake_size: float):
    """The flake material: white snow that scatters light (Principled, rough, faintly blue)
    and lets a share of it through (Translucent), fading to transparent toward the rim
    seen from the camera (Layer Weight "Facing"), so a flake renders as a soft white disc
    and, under motion blur, a soft streak. Rebuilt on every call (a handful of nodes), so a
    file baked by an older version gets the current look on its next bake."""
    material = bpy.data.materials.get(FLAKE_MATERIAL_NAME)
    if material is None:
        material = bpy.data.materials.new(FLAKE_MATERIAL_NAME)
    tree = node_tree(material)
    nodes, links = tree.nodes, tree.links
    nodes.clear()
    output = nodes.new('ShaderNodeOutputMaterial')
    principled = nodes.new('ShaderNodeBsdfPrincipled')
    values = {
        "Base Color": (0.93, 0.95, 1.0, 1.0),
        "Roughness": 0.6,
        "Sheen Weight": 0.3,
        "Sheen Roughness": 0.5,
        "Specular IOR Level": 0.3,
    }
    for name, value in values.items():
        if name in principled.inputs:
            principled.inputs[name].default_value = value
    translucent = nodes.new('ShaderNodeBsdfTranslucent')
    translucent.inputs["Color"].default_value = (0.9, 0.93, 1.0, 1.0)
    lit = nodes.new('ShaderNodeMixShader')
    lit.inputs[0].default_value = FLAKE_TRANSLUCENCY
    links.new(principled.outputs[0], lit.inputs[1])
    links.new(translucent.outputs[0], lit.inputs[2])
    layer = nodes.new('ShaderNodeLayerWeight')
    layer.inputs["Blend"].default_value = 0.5
    rim = nodes.new('ShaderNodeMath')
    rim.operation = 'POWER'
    rim.inputs[1].default_value = FLAKE_EDGE_SOFTNESS
    links.new(layer.outputs["Facing"], rim.inputs[0])
    transparent = nodes.new('ShaderNodeBsdfTransparent')
    soft = nodes.new('ShaderNodeMixShader')
    links.new(rim.outputs[0], soft.inputs[0])
    links.new(lit.outputs[0], soft.inputs[1])
    links.new(transparent.outputs[0], soft.inputs[2])
    links.new(soft.outputs[0], output.inputs["Surface"])
    for index, node in enumerate((principled, translucent, layer, rim, lit, transparent,
                                  soft, output)):
        node.location = (200.0 * (index // 2), -220.0 * (index % 2))
    if hasattr(material, "blend_method"):
        material.blend_method = 'HASHED'           # EEVEE: the soft rim
    material.diffuse_color = (0.93, 0.95, 1.0, 1.0)
    material["snowfall_flake_radius"] = float(flake_size)
    return material
