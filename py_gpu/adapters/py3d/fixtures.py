"""py_3d scenes shared by the bridge's fidelity tests and its benchmark (``benchmarks/py3d_bench.py``).

Each builder returns ``(scene, camera, settings keywords)``; ``settings(name, width, height)``
makes the ``RenderSettings``. Together they cover flat and smooth lighting with Sun and Lamp,
textures, wireframe, lines and points, text, materials with roughness and fuzz, shadows,
reflections, culling, and a camera on a ground plane. ``three_spheres`` and ``fruit_bowl`` are
the benchmark's scenes (1,080 and 1,248 triangles at their settings).
"""

from __future__ import annotations

import math

from . import _py3d

__all__ = ["SCENES", "GROUND_SCENES", "build", "settings"]


def _texture(width: int, height: int, texel):
    py_3d = _py3d()
    return py_3d.PixelBuffer(width, height, [py_3d.Color(*texel(x, y)) for y in range(height) for x in range(width)])


def _checker(width: int = 32, height: int = 32, cell: int = 4):
    return _texture(width, height, lambda x, y: (230, 60, 40) if (x // cell + y // cell) % 2 else (240, 230, 200))


def three_spheres():
    """Three flat-lit spheres (20 x 10 segments, 1,080 triangles) under a Sun and a Lamp."""
    p = _py3d()
    m = p.Material
    scene = p.Scene()
    scene.add(p.Sphere((-1.2, 0, 0), 0.7, m(color=(220, 80, 60), specular=0.4)))
    scene.add(p.Sphere((0.2, 0, 0.3), 0.6, m(color=(60, 200, 90), specular=0.2, shininess=12)))
    scene.add(p.Sphere((1.4, 0.1, 0.0), 0.5, m(color=(80, 120, 230), absorption=(0.1, 0.1, 0.0))))
    scene.add_light(p.Sun((-0.4, -0.7, 1.0), color=(255, 244, 225), intensity=0.85))
    scene.add_light(p.Lamp((-2.0, 1.7, -2.0), color=(80, 150, 255), intensity=2.6))
    camera = p.Camera(position=(0.3, 0.6, -2.5), target=(0, 0, 0), fov_degrees=52)
    return scene, camera, dict(background=(7, 9, 14), ambient=0.06, sphere_segments=20, sphere_rings=10)


def smooth_spheres():
    """The three spheres with ``smooth_shading`` (lit per pixel from their vertex normals)."""
    scene, camera, kw = three_spheres()
    return scene, camera, dict(kw, smooth_shading=True)


def textured():
    """A textured sphere and a textured plane, smooth shading, gamma 1.1."""
    p = _py3d()
    m = p.Material
    scene = p.Scene()
    tex = _checker()
    scene.add(p.Sphere((-0.8, 0.1, 0), 0.8, m(color=(255, 255, 255), texture=tex, specular=0.2)))
    scene.add(p.Plane((0.9, 0, 0.2), (0, 0, -1), m(color=(255, 255, 255), texture=tex, roughness=0.3), size=1.4))
    scene.add_light(p.Sun((-0.3, -0.6, 1.0), intensity=0.9))
    scene.add_light(p.Lamp((0.5, 1.5, -2.0), intensity=1.5))
    camera = p.Camera(position=(0, 0.5, -3.5), target=(0, 0, 0))
    return scene, camera, dict(ambient=0.1, smooth_shading=True, gamma=1.1)


def wireframe():
    """A box and a sphere in ``wireframe`` (1 px edges in the material color, gamma 1.2)."""
    p = _py3d()
    scene = p.Scene()
    scene.add(p.Box((0, 0, 0), (1.2, 1, 1), p.Material(color=(240, 200, 80))))
    scene.add(p.Sphere((1.3, 0.2, 0.5), 0.5, p.Material(color=(90, 200, 240))))
    camera = p.Camera(position=(1.5, 1.3, -3.0), target=(0.3, 0, 0))
    return scene, camera, dict(wireframe=True, gamma=1.2, sphere_segments=10, sphere_rings=5)


def lines_points():
    """A lit box with a ``Line3``, a ``LineSet3`` and ``Point3`` s in front of and behind it."""
    p = _py3d()
    m = p.Material
    scene = p.Scene()
    scene.add(p.Box((0, 0, 0), (1, 1, 1), m(color=(120, 120, 200))))
    scene.add(p.Line3((-2, -1, -0.5), (2, 1.2, 0.5), m(color=(250, 80, 80))))
    scene.add(p.LineSet3([((-1.5, 1, 0), (1.5, 1, 0)), ((0, -1.2, -1), (0, 1.4, 1)), ((-1, -1, -1), (1.2, -0.8, 2))],
                         m(color=(80, 250, 120))))
    for i in range(12):
        scene.add(p.Point3((-1.6 + 0.3 * i, -0.9 + 0.12 * i, -0.8 + 0.15 * i), m(color=(255, 255, 0))))
    scene.add_light(p.Sun((0.2, -1, 0.5)))
    camera = p.Camera(position=(0.4, 0.8, -3.5), target=(0, 0, 0))
    return scene, camera, dict(ambient=0.15, gamma=1.3)


def text():
    """A sphere with a ``TextBulletin`` and a ``FloatingTextBulletin``."""
    p = _py3d()
    scene = p.Scene()
    scene.add(p.Sphere((0, 0, 0), 0.8, p.Material(color=(200, 120, 220), specular=0.3)))
    scene.add_light(p.Sun((0, -1, 1)))
    scene.add_bulletin(p.TextBulletin("HELLO PY_GPU 123", position=(4, 4)))
    scene.add_bulletin(p.FloatingTextBulletin("SPHERE", position=(0, 0.9, 0), background=(20, 30, 40)))
    camera = p.Camera(position=(0, 0.3, -3), target=(0, 0, 0))
    return scene, camera, dict(ambient=0.1)


def materials():
    """Roughness, fuzziness, emission, diffuse, absorption, specular and reflectivity under
    ``light_wrap``, ``bounce_light``, ``edge_highlight``, smooth shading and gamma."""
    p = _py3d()
    m = p.Material
    scene = p.Scene()
    scene.add(p.Sphere((-1.3, 0, 0), 0.55, m(color=(200, 90, 70), roughness=0.7, fuzziness=0.6, specular=0.3)))
    scene.add(p.Sphere((0, 0, 0), 0.55, m(color=(90, 200, 120), fuzziness=0.3, emission=(20, 10, 0), diffuse=0.8,
                                          absorption=(0.2, 0, 0.1))))
    scene.add(p.Box((1.3, 0, 0), (0.8, 0.8, 0.8), m(color=(120, 140, 230), roughness=0.4, specular=0.6, shininess=8,
                                                   reflectivity=0.3)))
    scene.add_light(p.Sun((-0.5, -0.8, 0.6), intensity=0.8))
    scene.add_light(p.Lamp((1.5, 1.5, -1.5), color=(255, 200, 150), intensity=2.0, radius=6.0))
    camera = p.Camera(position=(0, 0.7, -3.6), target=(0, 0, 0))
    return scene, camera, dict(ambient=0.08, light_wrap=0.3, bounce_light=0.2, edge_highlight=True, gamma=1.12,
                               smooth_shading=True)


def ground():
    """A camera on a tiled ground plane: the tiles under the camera reach behind its near plane."""
    p = _py3d()
    m = p.Material
    scene = p.Scene()
    grass = m(color=(120, 200, 110), roughness=0.5, fuzziness=0.2)
    tiles = []
    for i in range(-4, 4):
        for j in range(-3, 5):
            a, b, c, d = ((i, 0, j), (i + 1, 0, j), (i + 1, 0, j + 1), (i, 0, j + 1))
            tiles += [p.Triangle(a, c, b, grass), p.Triangle(a, d, c, grass)]
    scene.add(p.Mesh(tiles))
    scene.add(p.Sphere((0, 0.6, 1.5), 0.6, m(color=(220, 80, 60), specular=0.4)))
    scene.add(p.Box((1.5, 0.4, 2.5), (0.8, 0.8, 0.8), m(color=(60, 140, 220))))
    scene.add_light(p.Sun((-0.5, -1, 0.3)))
    camera = p.Camera(position=(0, 0.5, -1.0), target=(0.3, 0.3, 1.5), near=0.3)
    return scene, camera, dict(ambient=0.2, background=(10, 12, 30))


def shadows():
    """``ray_traced_shadows`` with soft Lamp samples and a half-transparent box."""
    p = _py3d()
    m = p.Material
    scene = p.Scene()
    scene.add(p.Plane((0, -0.6, 0), (0, 1, 0), m(color=(200, 200, 200)), size=6))
    scene.add(p.Sphere((0, 0.2, 0), 0.5, m(color=(220, 80, 60), specular=0.3)))
    scene.add(p.Box((1.0, -0.2, 0.3), (0.5, 0.8, 0.5), m(color=(80, 160, 220), light_transmission=0.5)))
    scene.add_light(p.Sun((0.4, -1, 0.3), intensity=0.9))
    scene.add_light(p.Lamp((-1.5, 1.8, -1), intensity=2.0))
    camera = p.Camera(position=(0.5, 1.5, -3.2), target=(0.2, -0.2, 0))
    return scene, camera, dict(ambient=0.1, ray_traced_shadows=True, shadow_samples=3, shadow_softness=0.15,
                               sphere_segments=10, sphere_rings=5)


def reflections():
    """``reflection_bounces`` on a mirror-like sphere and box, smooth shading."""
    p = _py3d()
    m = p.Material
    scene = p.Scene()
    scene.add(p.Sphere((-0.7, 0, 0), 0.6, m(color=(200, 200, 210), reflectivity=0.7, specular=0.5)))
    scene.add(p.Box((0.8, 0, 0), (0.8, 0.8, 0.8), m(color=(180, 120, 60), reflectivity=0.3)))
    scene.add_light(p.Sun((-0.3, -1, 0.5)))
    camera = p.Camera(position=(0, 0.5, -3), target=(0, 0, 0))
    return scene, camera, dict(ambient=0.1, reflection_bounces=2, smooth_shading=True)


def one_sided_culled():
    """The three spheres and a slab with one-sided lighting, ``cull_backfaces`` and
    ``max_render_distance`` (py_3d's sphere faces point inward: culling keeps their far side)."""
    p = _py3d()
    scene, camera, kw = three_spheres()
    scene.add(p.Box((0, -1, 0.5), (3, 0.2, 2), p.Material(color=(150, 150, 150))))
    return scene, camera, dict(kw, two_sided_lighting=False, cull_backfaces=True, max_render_distance=4.4)


def fruit_bowl():
    """A fruit-bowl-like scene (1,248 triangles): textured floor, bowl and perturbed fruit, a
    lamp primitive, stems as lines, three lights, two bulletins, the fruit bowl demo's settings."""
    p = _py3d()
    m = p.Material
    scene = p.Scene()
    wood = _texture(64, 32, lambda x, y: (150 + int(30 * math.sin(x * 0.7 + y * 0.1)), 100 + (x * 7 + y) % 20, 60))
    floor = _texture(64, 64, lambda x, y: (200, 190, 170) if (x // 8 + y // 8) % 2 else (90, 70, 60))
    scene.add(p.Plane((0, -1.75, 0), (0, 1, 0), m(color=(255, 255, 255), texture=floor, absorption=(0.14, 0.08, 0.05),
                                                  roughness=0.64, fuzziness=0.12, specular=0.04, shininess=10.0),
                      size=6.0))
    scene.add(p.Bowl((0, 0, 0), 1.35, m(color=(255, 255, 255), texture=wood, roughness=0.5, fuzziness=0.05,
                                         specular=0.2, shininess=20.0), depth=0.96, thickness=0.075))
    fruit = [((-0.42, -0.12, 0.08), 0.23, (230, 40, 40), 12), ((0.28, -0.2, -0.1), 0.27, (250, 150, 30), 31),
             ((0.0, 0.12, 0.3), 0.19, (240, 220, 60), 44), ((-0.32, -0.08, -0.34), 0.42, (50, 142, 78), 7)]
    for center, radius, col, seed in fruit:
        skin = _texture(32, 16, lambda x, y, c=col: (min(255, c[0] + x * 13 % 30), min(255, c[1] + y * 7 % 25), c[2]))
        scene.add(p.Sphere(center, radius, m(color=(255, 255, 255), texture=skin, roughness=0.3, fuzziness=0.1,
                                             specular=0.2, shininess=24.0, reflectivity=0.03),
                           perturbation=p.SurfacePerturbation(magnitude=0.02, scale=4.0, seed=seed)))
        top = (center[0], center[1] + radius, center[2])
        scene.add(p.Line3(top, (top[0] + 0.1, top[1] + radius * 0.3, top[2]), m(color=(40, 30, 25))))
    scene.add(p.Box((-1.77, -0.86, -1.18), (1.34, 0.66, 0.06), m(color=(8, 9, 10), roughness=0.55, specular=0.08,
                                                                shininess=16.0)))
    scene.add(p.LampPrimitive((1.6, 0.6, 0.9), color=(255, 220, 180), segments=8))
    scene.add_light(p.Sun((-0.35, -0.72, 0.58), color=(255, 244, 225), intensity=0.7))
    scene.add_light(p.Lamp((1.6, 0.6, 0.9), color=(255, 220, 180), intensity=1.6))
    scene.add_light(p.Lamp((-1.2, 1.4, -1.5), color=(150, 180, 255), intensity=1.2))
    scene.add_bulletin(p.FloatingTextBulletin("FRUIT BOWL", position=(0.0, 1.0, 0.0), color=(250, 244, 224),
                                              background=(15, 9, 5)))
    scene.add_bulletin(p.TextBulletin("PY_GPU BRIDGE", position=(6, 6)))
    camera = p.Camera(position=(0.0, 2.9, -2.98), target=(0.0, -0.28, 0.0), fov_degrees=48)
    return scene, camera, dict(background=(8, 11, 15), gamma=1.12, light_wrap=0.16, bounce_light=0.08,
                               smooth_shading=True, two_sided_lighting=False, sphere_segments=14, sphere_rings=7)


#: name -> builder, in the order the fidelity table lists them.
SCENES = {f.__name__: f for f in (three_spheres, smooth_spheres, textured, wireframe, lines_points, text, materials,
                                  ground, shadows, reflections, one_sided_culled, fruit_bowl)}
#: Scenes whose camera stands on geometry that reaches behind its near plane (CPURenderer drops it).
GROUND_SCENES = ("ground",)


def build(name: str):
    """``(scene, camera, settings keywords)`` of the scene ``name``."""
    return SCENES[name]()


def settings(keywords: dict, width: int, height: int):
    """py_3d ``RenderSettings`` of a scene's keywords at ``width`` x ``height``."""
    return _py3d().RenderSettings(width=width, height=height, **keywords)
