"""py_3d's material and light model in torch, over many shading points at once.

Every function mirrors one function of ``py_3d.render`` / ``py_3d.materials`` /
``py_3d.lights`` and evaluates it for ``N`` points in float64, in the same order of operations,
so results agree with ``CPURenderer`` to the last bit in almost every pixel (``pow`` may differ
in the last place, which can move a truncated 8-bit value by one). Colors are float64 tensors of
0-255 integers, as py_3d's ``Color``; ``from_floats`` truncates as ``Color.from_floats`` does.

- :func:`lighting`: ``_lighting_channels`` (bounce light, Sun and Lamp samples, ``light_wrap``,
  Blinn-Phong highlights, shadows through :class:`Shadows`).
- :func:`shade`: ``Material.shade``; :func:`reflect`: ``_apply_ray_traced_reflection``;
  :func:`surface`: ``_apply_surface_attributes`` (roughness, fuzziness noise); :func:`gamma`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from . import _py3d
from .scene import F64, MaterialTable, vec_cross, vec_dot, vec_length, vec_normalized


def from_floats(x: torch.Tensor) -> torch.Tensor:
    """``Color.from_floats``: ``int(clamp(x, 0, 1) * 255)`` (truncated), as float64 0-255 integers."""
    return torch.floor(x.clamp(0.0, 1.0) * 255.0)


def gamma(color: torch.Tensor, value: float) -> torch.Tensor:
    """``_apply_gamma``: ``from_floats((c / 255) ** (1 / gamma))``; unchanged when gamma is 1."""
    if abs(value - 1.0) < 1e-9:
        return color
    return from_floats((color / 255.0) ** (1.0 / value))


@dataclass(frozen=True)
class Light:
    """A py_3d ``Sun`` (``direction`` is its normalized sample direction) or ``Lamp``
    (``position``, ``radius``); ``color`` is ``Color.to_floats()``."""

    kind: str
    color: tuple
    intensity: float
    direction: tuple | None = None
    position: tuple | None = None
    radius: float | None = None


def scene_lights(lights) -> tuple[list[Light], list[str]]:
    """``(lights the bridge evaluates, descriptions of those it cannot)`` of ``scene.lights``.

    Objects without ``sample`` are skipped, as ``CPURenderer`` skips them. A ``Sun`` or ``Lamp``
    (or a subclass that keeps their ``sample``) is evaluated in torch; any other light with a
    ``sample()`` is listed as unsupported (its frames go to ``CPURenderer``).
    """
    py_3d = _py3d()
    out, unsupported = [], []
    for light in lights:
        if not isinstance(light, (py_3d.Lamp, py_3d.Sun)) and not hasattr(light, "sample"):
            continue
        if isinstance(light, py_3d.Sun) and type(light).sample is py_3d.Sun.sample:
            d = light.sample(light.direction).direction.normalized()
            out.append(Light("sun", light.color.to_floats(), float(light.intensity), direction=(d.x, d.y, d.z)))
        elif isinstance(light, py_3d.Lamp) and type(light).sample is py_3d.Lamp.sample:
            p = light.position
            out.append(Light("lamp", light.color.to_floats(), float(light.intensity), position=(p.x, p.y, p.z),
                             radius=None if light.radius is None else float(light.radius)))
        else:
            unsupported.append(f"light {type(light).__module__}.{type(light).__qualname__} (its sample() runs in Python)")
    return out, unsupported


def _const(values, like: torch.Tensor) -> torch.Tensor:
    return torch.tensor(values, dtype=F64, device=like.device)


def sample_light(light: Light, points: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``light.sample(point)`` followed by ``sample.direction.normalized()``:
    ``(direction [N, 3], intensity [N])``."""
    n = points.shape[0]
    if light.kind == "sun":
        return _const(light.direction, points).expand(n, 3), torch.full((n,), light.intensity, dtype=F64,
                                                                          device=points.device)
    offset = _const(light.position, points) - points
    distance = vec_length(offset)
    intensity = light.intensity * (1.0 / (1.0 + distance * distance))
    if light.radius is not None:
        intensity = torch.where(distance > light.radius, torch.zeros_like(intensity), intensity)
    at_lamp = distance == 0.0
    if not bool(at_lamp.any()):
        return vec_normalized(offset / distance[:, None], None), intensity
    direction = offset / torch.where(at_lamp, torch.ones_like(distance), distance)[:, None]
    direction = torch.where(at_lamp[:, None], _const((0.0, 1.0, 0.0), points).expand(n, 3), direction)
    intensity = torch.where(at_lamp, torch.full_like(intensity, light.intensity), intensity)
    return vec_normalized(direction, None), intensity


def lighting(points: torch.Tensor, normals: torch.Tensor, views: torch.Tensor, material: torch.Tensor,
             table: MaterialTable, lights: list[Light], settings, shadows: "Shadows | None" = None,
             source: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """``_lighting_channels`` at ``N`` points: ``(diffuse [N, 3], specular [N, 3])``.

    Args:
        points, normals, views: float64 ``[N, 3]`` shading points, normals (already flipped for
            two-sided lighting) and unit directions to the eye.
        material: int64 ``[N]`` rows of ``table``.
        shadows: with ``ray_traced_shadows``, the scene's shadow casters; ``source`` int64 ``[N]``
            the face each point lies on (never its own occluder).
    """
    n = points.shape[0]
    diffuse = torch.zeros(n, 3, dtype=F64, device=points.device)
    specular = torch.zeros(n, 3, dtype=F64, device=points.device)
    if settings.bounce_light > 0.0:
        sky = normals[:, 1].clamp_min(0.0) * settings.bounce_light
        floor = (-normals[:, 1]).clamp_min(0.0) * settings.bounce_light
        diffuse = torch.stack([0.22 * sky + 0.32 * floor, 0.26 * sky + 0.22 * floor, 0.34 * sky + 0.14 * floor], -1)
    shininess = table.shininess[material]
    glossy = (table.specular[material] > 0.0) | (table.reflectivity[material] > 0.0)
    wrap = settings.light_wrap
    for light in lights:
        direction, intensity = sample_light(light, points)
        facing = vec_dot(normals, direction)
        response = ((facing + wrap) / (1.0 + wrap)).clamp_min(0.0) if wrap > 0.0 else facing.clamp_min(0.0)
        strength = response * intensity
        if shadows is not None:
            lit = strength > 0.0
            if bool(lit.any()):
                factor = shadows.factor(points[lit], light, direction[lit], source[lit])
                strength = strength.masked_scatter(lit, strength[lit] * factor)
        color = _const(light.color, points)
        diffuse = diffuse + color * strength[:, None]
        shine = glossy & (strength > 0.0)
        if bool(shine.any()):
            halfway = vec_normalized(direction + views, direction)
            highlight = vec_dot(normals, halfway).clamp_min(0.0) ** shininess * intensity
            specular = specular + torch.where(shine[:, None], color * highlight[:, None], 0.0)
    return diffuse, specular


def shade(diffuse: torch.Tensor, specular: torch.Tensor, base: torch.Tensor, material: torch.Tensor,
          table: MaterialTable, ambient: float) -> torch.Tensor:
    """``Material.shade(diffuse, ambient, base_color, specular)`` for ``N`` points; ``base`` is the
    0-255 base color ``[N, 3]`` (the material's color or a texel)."""
    emitted = table.emission[material] / 255.0
    absorbed = 1.0 - table.absorption[material]
    strength = table.specular[material] * (1.0 - table.roughness[material] * 0.85) + table.reflectivity[material] * 0.5
    channel = emitted + base / 255.0 * absorbed * (ambient + diffuse * table.diffuse[material][:, None])
    return from_floats(channel + specular * strength[:, None])


def reflect(color: torch.Tensor, material: torch.Tensor, table: MaterialTable, normals: torch.Tensor,
            views: torch.Tensor, bounces: int) -> torch.Tensor:
    """``_apply_ray_traced_reflection`` (py_3d's environment reflection) for ``N`` points."""
    reflectivity = table.reflectivity[material]
    mirror = reflectivity > 0.0
    if bounces <= 0 or not bool(mirror.any()):
        return color
    back = _const((0.0, 0.0, -1.0), views)
    view = vec_normalized(views, back)
    incoming = -view
    reflection = vec_normalized(incoming - normals * (2.0 * vec_dot(incoming, normals))[:, None], normals)
    traced = _environment(reflection, bounces)
    alignment = vec_dot(view, vec_normalized(normals, _const((0.0, 1.0, 0.0), normals))).abs().clamp(0.0, 1.0)
    f0 = (0.025 + reflectivity * 0.24).clamp(0.02, 0.72)
    fresnel = f0 + (1.0 - f0) * (1.0 - alignment) ** 5.0
    amount = (reflectivity * (0.28 + min(5, bounces) * 0.10) + fresnel * 0.34).clamp(0.0, 0.96)[:, None]
    mixed = from_floats(color / 255.0 * (1.0 - amount) + traced * amount)
    return torch.where(mirror[:, None], mixed, color)


def _environment(direction: torch.Tensor, bounces: int) -> torch.Tensor:
    """``_trace_reflection_environment``: the sky/ground/sun color along ``direction`` ``[N, 3]``."""
    ray = vec_normalized(direction, _const((0.0, 1.0, 0.0), direction))
    s = _py3d().Vec3(-0.35, 0.72, -0.58).normalized()
    sun_direction = _const((s.x, s.y, s.z), direction)
    energy, normalizer = 1.0, 0.0
    total = torch.zeros_like(ray)
    for index in range(max(1, bounces)):
        y = ray[:, 1]
        sky, floor, horizon = y.clamp_min(0.0), (-y).clamp_min(0.0), (1.0 - y.abs()).clamp_min(0.0)
        sun_dot = vec_dot(ray, sun_direction).clamp_min(0.0)
        core, bloom = sun_dot ** 180.0, sun_dot ** 24.0
        sample = torch.stack([
            (0.045 + sky * 0.25) + (0.060 + floor * 0.18) + horizon * 0.20 + (core * 2.2 + bloom * 0.46),
            (0.070 + sky * 0.38) + (0.065 + floor * 0.15) + horizon * 0.24 + (core * 1.82 + bloom * 0.38),
            (0.110 + sky * 0.62) + (0.060 + floor * 0.11) + horizon * 0.26 + (core * 1.18 + bloom * 0.24),
        ], -1)
        total = total + sample * energy
        normalizer += energy
        if index == bounces - 1:
            break
        x, z = ray[:, 0], ray[:, 2]
        down = torch.stack([x * 0.82, -y * 0.78 + 0.16, z * 0.82], -1)
        up = torch.stack([x * 0.76 - z * 0.18, y * 0.54 - 0.12, z * 0.76 + x * 0.18], -1)
        ray = vec_normalized(torch.where((y < 0.0)[:, None], down, up), ray)
        energy *= 0.52
    return (total / normalizer).clamp(0.0, 1.0)


def surface(color: torch.Tensor, material: torch.Tensor, table: MaterialTable, x: torch.Tensor, y: torch.Tensor,
            depth: torch.Tensor, *, noise: bool = True) -> torch.Tensor:
    """``_apply_surface_attributes``: roughness darkening and fuzziness noise at pixels ``(x, y)``
    (int64 ``[N]``) of depth ``[N]``; ``noise=False`` leaves the fuzziness noise out."""
    roughness, fuzziness = table.roughness[material], table.fuzziness[material]
    factor = torch.where(roughness != 0.0, 1.0 - roughness * 0.18, torch.ones_like(roughness))
    fuzzy = fuzziness != 0.0
    if noise and bool(fuzzy.any()):
        grain = surface_noise(x, y, depth)
        factor = torch.where(fuzzy, factor * (1.0 + (grain - 0.5) * fuzziness * 0.55), factor)
    return from_floats(color / 255.0 * factor[:, None])


def surface_noise(x: torch.Tensor, y: torch.Tensor, depth: torch.Tensor) -> torch.Tensor:
    """``_surface_noise``: py_3d's integer hash of the pixel and ``int(depth * 1000)``, in [0, 1].
    int64 arithmetic wraps where Python's integers grow, which leaves the low 16 bits the same."""
    z = torch.trunc(depth * 1000.0).to(torch.int64)
    value = (x * 73856093) ^ (y * 19349663) ^ (z * 83492791)
    value = (value ^ (value >> 13)) * 1274126177
    return (value & 0xFFFF).to(F64) / 0xFFFF


class Shadows:
    """``ray_traced_shadows``: shadow rays from shading points against every scene triangle
    (``_shadow_factor_for_light``, ``_shadow_transmission``, ``_ray_triangle_distance``),
    vectorized over points x triangles in chunks of at most ``pairs`` pairs."""

    def __init__(self, corners: torch.Tensor, transmission: torch.Tensor, settings, *, pairs: int = 1 << 18):
        tri = corners.reshape(-1, 3, 3)
        self.a = tri[:, 0]
        self.edge_one = tri[:, 1] - tri[:, 0]
        self.edge_two = tri[:, 2] - tri[:, 0]
        self.transmission = transmission  # [T] Material.light_transmission per triangle
        self.bias = settings.shadow_bias
        self.samples = settings.shadow_samples
        self.softness = settings.shadow_softness
        self.pairs = pairs

    def factor(self, points: torch.Tensor, light: Light, direction: torch.Tensor, source: torch.Tensor) -> torch.Tensor:
        """Light reaching ``points`` ``[n, 3]`` from ``light`` (sample ``direction`` ``[n, 3]``), in [0, 1]."""
        if light.kind == "sun":
            return self.transmission_along(points, direction, None, source)
        position = _const(light.position, points)
        distance = vec_length(position - points)
        total = self.transmission_along(points, direction, distance, source)
        if self.samples <= 1 or self.softness <= 0.0:
            return total
        tangent, bitangent = _sample_basis(direction)
        for index in range(1, self.samples):
            angle = math.tau * ((index * 0.6180339887498949) % 1.0)
            radius = self.softness * math.sqrt(index / max(1, self.samples - 1))
            spot = position + tangent * (math.cos(angle) * radius) + bitangent * (math.sin(angle) * radius)
            offset = spot - points
            reach = vec_length(offset)
            close = reach <= self.bias
            safe = torch.where(close, torch.ones_like(reach), reach)
            seen = self.transmission_along(points, offset / safe[:, None], reach, source)
            total = total + torch.where(close, torch.ones_like(seen), seen)
        return (total / self.samples).clamp(0.0, 1.0)

    def transmission_along(self, origin: torch.Tensor, direction: torch.Tensor, max_distance: torch.Tensor | None,
                           source: torch.Tensor) -> torch.Tensor:
        """``_shadow_transmission``: the product of the ``light_transmission`` of the triangles a
        ray crosses between ``shadow_bias`` and the light (0 once it is at most 1e-6)."""
        n, count = origin.shape[0], self.a.shape[0]
        out = torch.ones(n, dtype=F64, device=origin.device)
        if n == 0 or count == 0:
            return out
        start = origin + direction * self.bias
        limit = None if max_distance is None else max_distance - self.bias
        step = max(1, self.pairs // count)
        faces = torch.arange(count, device=origin.device)
        for lo in range(0, n, step):
            sl = slice(lo, lo + step)
            dist = self._distances(start[sl], direction[sl])  # [m, T], inf where missed
            hit = (dist > self.bias) & (faces[None, :] != source[sl, None])
            hit &= torch.isfinite(dist) if limit is None else dist < limit[sl, None]
            passed = torch.where(hit, self.transmission[None, :], 1.0).prod(1)
            passed = torch.where(passed <= 1e-6, torch.zeros_like(passed), passed.clamp(0.0, 1.0))
            if limit is not None:
                passed = torch.where(limit[sl] <= self.bias, torch.ones_like(passed), passed)
            out[sl] = passed
        return out

    def _distances(self, origin: torch.Tensor, direction: torch.Tensor) -> torch.Tensor:
        """``_ray_triangle_distance`` (Moller-Trumbore) of ``m`` rays and every triangle: ``[m, T]``."""
        eps = 1e-7
        d = direction[:, None, :]
        h = vec_cross(d, self.edge_two[None])  # [m, T, 3]
        det = vec_dot(self.edge_one[None], h)
        parallel = (det > -eps) & (det < eps)
        inv_det = 1.0 / torch.where(parallel, torch.ones_like(det), det)
        s = origin[:, None, :] - self.a[None]
        u = inv_det * vec_dot(s, h)
        q = vec_cross(s, self.edge_one[None])
        v = inv_det * vec_dot(d, q)
        t = inv_det * vec_dot(self.edge_two[None], q)
        miss = parallel | (u < 0.0) | (u > 1.0) | (v < 0.0) | (u + v > 1.0) | (t <= eps)
        return torch.where(miss, torch.full_like(t, math.inf), t)


def _sample_basis(direction: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``_shadow_sample_basis``: a tangent and bitangent around each direction ``[n, 3]``."""
    tangent = vec_cross(direction, _const((0.0, 1.0, 0.0), direction).expand_as(direction))
    small = vec_dot(tangent, tangent) < 1e-10
    other = vec_cross(direction, _const((1.0, 0.0, 0.0), direction).expand_as(direction))
    tangent = vec_normalized(torch.where(small[:, None], other, tangent), (1.0, 0.0, 0.0))
    bitangent = vec_normalized(vec_cross(direction, tangent), (0.0, 0.0, 1.0))
    return tangent, bitangent
