"""Wind-driven snow transport, CUDA build through CuPy (same names, signatures and rules as
kernels.reference.drift); one launch per function."""
import numpy as np

from ..contract import (BARE_GROUND, GRID_STEP_FROM, NO_SURFACE, OPEN_SNOWFIELD,
                        WAKE_SAMPLES, WRAP_THREADS, cuda_defines)
from .common import LAUNCH_BLOCK, blocks, get_kernel

SOURCE = r"""
__device__ __forceinline__ float weighted(float a, float weight_a, float b, float weight_b) {
    float total = a * weight_a + b * weight_b;
    float count = weight_a + weight_b;
    return count > 0.0f ? total / count : 0.0f;
}

extern "C" __global__ void surface_wind(const float* __restrict__ u, const float* __restrict__ v,
                                        const float* __restrict__ w,
                                        const float* __restrict__ fu,
                                        const float* __restrict__ fv,
                                        const float* __restrict__ fw,
                                        float* __restrict__ wind_x, float* __restrict__ wind_y,
                                        int nx, int ny, int nz, int scoured,
                                        const float* __restrict__ scour,
                                        float approach_speed, float heading_x,
                                        float heading_y) {
    int t = blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= nx * ny) return;
    int i = t % nx, j = t / nx;
    const long long slice = (long long)nx * ny;
    int k = 0;
    long long cu = 0, cv = 0;
    for (; k < nz; ++k) {
        cu = ((long long)k * ny + j) * (nx + 1) + i;
        cv = ((long long)k * (ny + 1) + j) * nx + i;
        float open = ((fu[cu] + fu[cu + 1]) + (fv[cv] + fv[cv + nx]))
                   + (fw[k * slice + t] + fw[(k + 1) * slice + t]);
        if (open > 0.0f) break;
    }
    if (k == nz) { wind_x[t] = 0.0f; wind_y[t] = 0.0f; return; }
    float wx = weighted(u[cu], fu[cu], u[cu + 1], fu[cu + 1]);
    float wy = weighted(v[cv], fv[cv], v[cv + nx], fv[cv + nx]);
    long long top = (k + 1) * slice + t;
    float wz = fw[top] > 0.0f ? w[top] : 0.0f;
    float horizontal = wx * wx + wy * wy;
    if (horizontal > 0.0f) {
        float factor = sqrtf((horizontal + wz * wz) / horizontal);
        wx = wx * factor;
        wy = wy * factor;
    }
    if (scoured) {
        float factor = scour[t];
        if (factor > 1.0f) {
            float speed = sqrtf(wx * wx + wy * wy);
            // as np.maximum(approach - speed, 0) and Numba's max: a NaN stays NaN
            float gap = approach_speed - speed;
            float deficit = gap < 0.0f ? 0.0f : gap;
            float vx = wx + deficit * heading_x, vy = wy + deficit * heading_y;
            float length = sqrtf(vx * vx + vy * vy);
            float along = vx * heading_x + vy * heading_y;
            float dx = heading_x, dy = heading_y;
            if (length > 0.0f && along > 0.0f) {
                dx = vx / length;
                dy = vy / length;
            }
            // not fmaxf: it drops a NaN speed, np.maximum and Numba's max keep it
            float magnitude = factor * (approach_speed > speed ? approach_speed : speed);
            wx = dx * magnitude;
            wy = dy * magnitude;
        } else {
            wx = wx * factor;
            wy = wy * factor;
        }
    }
    wind_x[t] = wx;
    wind_y[t] = wy;
}

extern "C" __global__ void saltation_flux(const float* __restrict__ wind_x,
                                          const float* __restrict__ wind_y, int wnx, int wny,
                                          float column_x0, float column_y0, float cell_size,
                                          float hx0, float hy0, float spacing,
                                          const bool* __restrict__ has_surface,
                                          float ustar_per_speed, float threshold, float flux_scale,
                                          float heading_x, float heading_y,
                                          float* __restrict__ flux_x, float* __restrict__ flux_y,
                                          int nx, int ny, int shelter,
                                          const float* __restrict__ height,
                                          const float* __restrict__ snow,
                                          const float* __restrict__ bubble_top) {
    int t = blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= nx * ny) return;
    int i = t % nx, j = t / nx;
    float fx = 0.0f, fy = 0.0f;
    if (has_surface[t]) {
        float half = 0.5f * cell_size;
        float ox = column_x0 + half, oy = column_y0 + half;
        float x = hx0 + (float)i * spacing, y = hy0 + (float)j * spacing;
        float sx = sample_bilinear(wind_x, wnx, wny, ox, oy, cell_size, x, y);
        float sy = sample_bilinear(wind_y, wnx, wny, ox, oy, cell_size, x, y);
        float speed = sqrtf(sx * sx + sy * sy);
        float ustar = ustar_per_speed * speed;
        float along = sx * heading_x + sy * heading_y;
        bool moving = ustar > threshold && along > 0.0f;
        if (moving && shelter)
            moving = height[t] + snow[t] >= sample_bilinear(bubble_top, wnx, wny, ox, oy,
                                                            cell_size, x, y);
        if (moving) {
            float q = flux_scale * ((ustar * ustar - threshold * threshold) / ustar);
            float per_speed = q / speed;
            fx = per_speed * sx;
            fy = per_speed * sy;
        }
    }
    flux_x[t] = fx;
    flux_y[t] = fy;
}

__device__ __forceinline__ float pair(float q_low, float q_high, float snow_low, float snow_high,
                                      float surface_low, float surface_high, float courant,
                                      float max_rise) {
    float face = 0.5f * (q_low + q_high);
    float amount = fabsf(face) * courant;
    float donor = face > 0.0f ? snow_low : snow_high;
    amount = fminf(amount, 0.25f * donor);
    float rise = face > 0.0f ? surface_high - surface_low : surface_low - surface_high;
    if (!(rise <= max_rise)) return 0.0f;
    return face > 0.0f ? amount : -amount;
}

// One thread per node. With downwind_axis 0 or 1 the wrap faces of that axis's edges
// leave their inflow out; the thread of each first-edge node writes its wrap face's
// transfer to wrap[3 + n], and the last block to finish (wrap[2], a uint32 count of
// finished blocks, 0 between launches) sums them in the reference's edge_sum order,
// writes the shares to wrap[0], wrap[1] and adds them to the edges' surface nodes.
// the open face before the first (first) or after the last node of a line along the
// downwind axis (reference _boundary_faces)
__device__ __forceinline__ float boundary_face(float q, float s, bool surface, float c,
                                               float inflow_limit, bool first) {
    if (!surface) return 0.0f;
    float amount = fabsf(q) * c;
    if (first) return q > 0.0f ? fminf(amount, inflow_limit) : -fminf(amount, 0.25f * s);
    return q > 0.0f ? fminf(amount, 0.25f * s) : -fminf(amount, inflow_limit);
}

// With opened (an open upwind fetch) the edges across downwind_axis are open faces
// instead of a wrap: the threads of the edge nodes write them to wrap[3 + n] (first edge)
// and wrap[3 + size + n] (last edge), and the last block sums what they carried in and
// out (the reference's edge_sum order) into books[0], books[1] (double).
extern "C" __global__ void drift_transport(const float* __restrict__ flux_x,
                                           const float* __restrict__ flux_y,
                                           const float* __restrict__ height,
                                           const bool* __restrict__ has_surface,
                                           const float* __restrict__ snow, float c, float r,
                                           float* snow_out, int nx, int ny,
                                           int downwind_axis, float* wrap, int opened,
                                           float inflow_limit, double* books) {
    int t = blockIdx.x * blockDim.x + threadIdx.x;
    if (t < nx * ny) {
        int i = t % nx, j = t / nx;
        float s = snow[t];
        float here = height[t] + s;
        // the neighbours wrap around the grid's edges
        int w = j * nx + (i == 0 ? nx - 1 : i - 1), e = j * nx + (i == nx - 1 ? 0 : i + 1);
        int south = (j == 0 ? ny - 1 : j - 1) * nx + i, north = (j == ny - 1 ? 0 : j + 1) * nx + i;
        bool open = has_surface[t];
        float left = 0.0f, right = 0.0f, down = 0.0f, up = 0.0f;
        int size = downwind_axis == 1 ? ny : nx;
        if (opened && downwind_axis == 1 && i == 0) {
            left = boundary_face(flux_x[t], s, open, c, inflow_limit, true);
            wrap[3 + j] = left;
        } else if (open && has_surface[w]) left = pair(flux_x[w], flux_x[t], snow[w], s, height[w] + snow[w], here, c, r);
        if (opened && downwind_axis == 0 && j == 0) {
            down = boundary_face(flux_y[t], s, open, c, inflow_limit, true);
            wrap[3 + i] = down;
        } else if (open && has_surface[south]) down = pair(flux_y[south], flux_y[t], snow[south], s, height[south] + snow[south], here, c, r);
        if (opened && downwind_axis == 1 && i == nx - 1) {
            right = boundary_face(flux_x[t], s, open, c, inflow_limit, false);
            wrap[3 + size + j] = right;
        }
        if (opened && downwind_axis == 0 && j == ny - 1) {
            up = boundary_face(flux_y[t], s, open, c, inflow_limit, false);
            wrap[3 + size + i] = up;
        }
        if (!opened && downwind_axis == 1 && i == 0) wrap[3 + j] = left;
        else if (!opened && downwind_axis == 0 && j == 0) wrap[3 + i] = down;
        if (!open) {
            snow_out[t] = s;
        } else {
            if (!(opened && downwind_axis == 1 && i == nx - 1) && has_surface[e]) right = pair(flux_x[t], flux_x[e], s, snow[e], here, height[e] + snow[e], c, r);
            if (!(opened && downwind_axis == 0 && j == ny - 1) && has_surface[north]) up = pair(flux_y[t], flux_y[north], s, snow[north], here, height[north] + snow[north], c, r);
            float outflow = fmaxf(-left, 0.0f) + fmaxf(right, 0.0f);
            outflow = outflow + fmaxf(-down, 0.0f);
            outflow = outflow + fmaxf(up, 0.0f);
            float gain_left = fmaxf(left, 0.0f), gain_right = fmaxf(-right, 0.0f);
            float gain_down = fmaxf(down, 0.0f), gain_up = fmaxf(-up, 0.0f);
            if (opened) {
                // the open faces carry their own inflow
            } else if (downwind_axis == 1) {
                if (i == 0) gain_left = 0.0f;
                if (i == nx - 1) gain_right = 0.0f;
            } else if (downwind_axis == 0) {
                if (j == 0) gain_down = 0.0f;
                if (j == ny - 1) gain_up = 0.0f;
            }
            float inflow = gain_left + gain_right;
            inflow = inflow + gain_down;
            inflow = inflow + gain_up;
            snow_out[t] = fmaxf(s - outflow, 0.0f) + inflow;
        }
    }
    if (downwind_axis != 0 && downwind_axis != 1) return;
    // the last block to finish shares the wrap (blockDim.x == WRAP_THREADS)
    __shared__ float forward[WRAP_THREADS];
    __shared__ float backward[WRAP_THREADS];
    __shared__ int low_count, high_count;
    __shared__ bool last_block;
    __threadfence();
    __syncthreads();
    unsigned int* finished = reinterpret_cast<unsigned int*>(wrap + 2);
    if (threadIdx.x == 0) {
        last_block = atomicAdd(finished, 1u) == gridDim.x - 1;
        low_count = 0;
        high_count = 0;
    }
    __syncthreads();
    if (!last_block) return;
    int thread = threadIdx.x;
    int size = downwind_axis == 1 ? ny : nx;
    if (opened) {
        float into = 0.0f, out = 0.0f;
        for (int n = thread; n < size; n += WRAP_THREADS) {
            float a = __ldcg(wrap + 3 + n), b = __ldcg(wrap + 3 + size + n);
            into = into + (fmaxf(a, 0.0f) + fmaxf(-b, 0.0f));
            out = out + (fmaxf(-a, 0.0f) + fmaxf(b, 0.0f));
        }
        forward[thread] = into;
        backward[thread] = out;
        __syncthreads();
        for (int width = WRAP_THREADS / 2; width >= 1; width /= 2) {
            if (thread < width) {
                forward[thread] = forward[thread] + forward[thread + width];
                backward[thread] = backward[thread] + backward[thread + width];
            }
            __syncthreads();
        }
        if (thread == 0) {
            books[0] = books[0] + (double)forward[0];
            books[1] = books[1] + (double)backward[0];
            *finished = 0u;       // ready for the next launch
        }
        return;
    }
    float f = 0.0f, b = 0.0f;
    int lows = 0, highs = 0;
    for (int n = thread; n < size; n += WRAP_THREADS) {
        float transfer = __ldcg(wrap + 3 + n);
        f = f + fmaxf(transfer, 0.0f);
        b = b + fmaxf(-transfer, 0.0f);
        long long first = downwind_axis == 1 ? (long long)n * nx : n;
        long long last = downwind_axis == 1 ? (long long)n * nx + nx - 1 : (long long)(ny - 1) * nx + n;
        lows += has_surface[first] ? 1 : 0;
        highs += has_surface[last] ? 1 : 0;
    }
    forward[thread] = f;
    backward[thread] = b;
    atomicAdd(&low_count, lows);
    atomicAdd(&high_count, highs);
    __syncthreads();
    for (int width = WRAP_THREADS / 2; width >= 1; width /= 2) {
        if (thread < width) {
            forward[thread] = forward[thread] + forward[thread + width];
            backward[thread] = backward[thread] + backward[thread + width];
        }
        __syncthreads();
    }
    float share_first = low_count > 0 ? forward[0] / (float)low_count : 0.0f;
    float share_last = high_count > 0 ? backward[0] / (float)high_count : 0.0f;
    for (int n = thread; n < size; n += WRAP_THREADS) {
        long long first = downwind_axis == 1 ? (long long)n * nx : n;
        long long last = downwind_axis == 1 ? (long long)n * nx + nx - 1 : (long long)(ny - 1) * nx + n;
        if (has_surface[first]) snow_out[first] = __ldcg(snow_out + first) + share_first;
        if (has_surface[last]) snow_out[last] = __ldcg(snow_out + last) + share_last;
    }
    if (thread == 0) {
        wrap[0] = share_first;
        wrap[1] = share_last;
        *finished = 0u;       // ready for the next launch
    }
}

__device__ __forceinline__ int column_index(float c, float origin, float cell_size, int count) {
    int index = (int)floorf((c - origin) * (1.0f / cell_size));
    return (index >= 0 && index < count) ? index : -1;
}

// one thread per wind column: the highest surface among the heightmap nodes inside it
extern "C" __global__ void column_surface(const float* __restrict__ height,
                                          const float* __restrict__ snow,
                                          const bool* __restrict__ has_surface, int nx, int ny,
                                          float hx0, float hy0, float spacing, float x0, float y0,
                                          float cell_size, float* __restrict__ surface_out,
                                          int wnx, int wny) {
    int t = blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= wnx * wny) return;
    int ci = t % wnx, cj = t / wnx;
    // candidate node ranges, widened by one; the exact test is column_index below
    int i0 = max((int)floorf((x0 + (float)ci * cell_size - hx0) / spacing) - 1, 0);
    int i1 = min((int)floorf((x0 + (float)(ci + 1) * cell_size - hx0) / spacing) + 1, nx - 1);
    int j0 = max((int)floorf((y0 + (float)cj * cell_size - hy0) / spacing) - 1, 0);
    int j1 = min((int)floorf((y0 + (float)(cj + 1) * cell_size - hy0) / spacing) + 1, ny - 1);
    float best = NO_SURFACE;
    for (int j = j0; j <= j1; ++j) {
        if (column_index(hy0 + (float)j * spacing, y0, cell_size, wny) != cj) continue;
        for (int i = i0; i <= i1; ++i) {
            if (column_index(hx0 + (float)i * spacing, x0, cell_size, wnx) != ci) continue;
            long long n = (long long)j * nx + i;
            float value = has_surface[n] ? height[n] + snow[n] : NO_SURFACE;
            best = fmaxf(best, value);
        }
    }
    surface_out[t] = best;
}

// the surface s m straight upwind of (x, y) (centre), and that at most the mean across
// the wake's window (returned)
__device__ __forceinline__ float upwind_surface(const float* __restrict__ column_height,
                                                int nx, int ny, float ox, float oy, float h,
                                                float x, float y, float s, float heading_x,
                                                float heading_y, float spread,
                                                float* centre_out) {
    float cx = x - s * heading_x, cy = y - s * heading_y;
    float half = spread * s;
    float total = 0.0f, centre = 0.0f;
    for (int m = 0; m < WAKE_SAMPLES; ++m) {
        float offset = ((float)(2 * m - (WAKE_SAMPLES - 1)) / (float)(WAKE_SAMPLES - 1)) * half;
        float px = cx - offset * heading_y, py = cy + offset * heading_x;
        float value = sample_bilinear(column_height, nx, ny, ox, oy, h, px, py);
        total = total + value;
        if (2 * m == WAKE_SAMPLES - 1) centre = value;
    }
    *centre_out = centre;
    return fminf(centre, total / (float)WAKE_SAMPLES);
}

extern "C" __global__ void separation_bubble(const float* __restrict__ column_height, int nx,
                                             int ny, float x0, float y0, float h,
                                             float heading_x, float heading_y, float slope,
                                             float rise, float edge, float spread,
                                             float max_distance,
                                             float* __restrict__ bubble_top) {
    int t = blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= nx * ny) return;
    int i = t % nx, j = t / nx;
    float half_cell = 0.5f * h;
    float ox = x0 + half_cell, oy = y0 + half_cell;
    float x = ox + (float)i * h, y = oy + (float)j * h;
    float here = column_height[t];
    float face = edge * h;
    float top = NO_SURFACE;
    float centre = 0.0f, upwind = 0.0f;
    if (h <= max_distance)
        upwind = upwind_surface(column_height, nx, ny, ox, oy, h, x, y, h, heading_x,
                                heading_y, spread, &centre);
    // each point's line waits for the surface one cell further upwind (is its face bluff?)
    for (float s = h; s <= max_distance; s = s + h) {
        float further_centre;
        float further = upwind_surface(column_height, nx, ny, ox, oy, h, x, y, s + h,
                                       heading_x, heading_y, spread, &further_centre);
        float drop = s * slope;
        float line = upwind - drop;
        float lift = upwind - here;
        // the streamline climbs off a bluff face first (see the reference)
        if (rise > 0.0f && here != NO_SURFACE && lift > 0.0f && drop < lift
                && centre - further_centre >= face)
            line = line + (rise * s) * (1.0f - drop / lift);
        top = fmaxf(top, line);
        centre = further_centre;
        upwind = further;
    }
    bubble_top[t] = top;
}

__device__ __forceinline__ int grid_step(float component) {
    return component >= GRID_STEP_FROM ? 1 : (component <= -GRID_STEP_FROM ? -1 : 0);
}

extern "C" __global__ void horseshoe_vortex(const float* __restrict__ column_height, int nx,
                                            int ny, float cell_size, float heading_x,
                                            float heading_y, float reach, float gain,
                                            float leg, int max_cells,
                                            float* __restrict__ scour) {
    int t = blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= nx * ny) return;
    int i = t % nx, j = t / nx;
    float here = column_height[t];
    float best = 1.0f;
    if (here != NO_SURFACE) {
        for (int dj = -max_cells; dj <= max_cells; ++dj) {
            int n = j + dj;
            if (n < 0 || n >= ny) continue;
            for (int di = -max_cells; di <= max_cells; ++di) {
                int m = i + di;
                if ((di == 0 && dj == 0) || m < 0 || m >= nx) continue;
                float other = column_height[n * nx + m];
                if (other == NO_SURFACE) continue;
                float rise = __fsub_rn(other, here);
                if (!(rise > 0.0f)) continue;
                float limit = __fmul_rn(reach, rise);
                float along = __fadd_rn(__fmul_rn((float)di, heading_x),
                                        __fmul_rn((float)dj, heading_y));
                float factor = 1.0f;
                if (along >= 0.0f) {
                    float distance = __fmul_rn(sqrtf((float)(di * di + dj * dj)), cell_size);
                    if (distance < limit)
                        factor = __fadd_rn(1.0f, __fmul_rn(gain,
                                           __fsub_rn(1.0f, __fdiv_rn(distance, limit))));
                } else {
                    // a leg: the obstacle's crosswind edge on this side, this column beside
                    // its track (none straight behind it: the wake)
                    float cross = __fsub_rn(__fmul_rn((float)dj, heading_x),
                                            __fmul_rn((float)di, heading_y));
                    if (fabsf(cross) < 0.5f) continue;
                    float sign = cross > 0.0f ? -1.0f : 1.0f;
                    int bi = m + grid_step(sign * -heading_y);
                    int bj = n + grid_step(sign * heading_x);
                    if (bi < 0 || bi >= nx || bj < 0 || bj >= ny) continue;
                    float beside = column_height[bj * nx + bi];
                    if (beside != NO_SURFACE && __fsub_rn(beside, here) > __fmul_rn(0.5f, rise))
                        continue;
                    float lateral = __fmul_rn(fabsf(cross), cell_size);
                    float behind = __fmul_rn(-along, cell_size);
                    float length = __fmul_rn(leg, rise);
                    if (lateral < limit && behind < length) {
                        float fade = __fmul_rn(__fsub_rn(1.0f, __fdiv_rn(lateral, limit)),
                                               __fsub_rn(1.0f, __fdiv_rn(behind, length)));
                        factor = __fadd_rn(1.0f, __fmul_rn(gain, fade));
                    }
                }
                best = fmaxf(best, factor);
            }
        }
    }
    scour[t] = best;
}
"""
SOURCE = cuda_defines(WAKE_SAMPLES=WAKE_SAMPLES, WRAP_THREADS=WRAP_THREADS,
                      GRID_STEP_FROM=GRID_STEP_FROM, NO_SURFACE=NO_SURFACE) + SOURCE


def _kernel(name):
    return get_kernel(SOURCE, (), name)


def surface_wind(u, v, w, fractions, wind_x, wind_y, scour=None, approach_speed=0.0,
                 heading_x=1.0, heading_y=0.0):
    """Wind (m/s) along the surface at each column's lowest open cell, scaled by the
    horseshoe vortex's ``scour`` from the approach flow when given (see the reference)."""
    nz, ny, nx = w.shape[0] - 1, w.shape[1], w.shape[2]
    _kernel("surface_wind")(blocks(nx * ny), (LAUNCH_BLOCK,), (
        u, v, w, *fractions, wind_x, wind_y, np.int32(nx), np.int32(ny), np.int32(nz),
        np.int32(scour is not None), wind_x if scour is None else scour,
        np.float32(approach_speed), np.float32(heading_x), np.float32(heading_y)))


def saltation_flux(wind_x, wind_y, column_x0, column_y0, cell_size, hx0, hy0, spacing,
                   has_surface, ustar_per_speed, threshold, flux_scale, heading_x, heading_y,
                   flux_x, flux_y, height=None, snow_depth=None, bubble_top=None):
    """Saltation volume flux (m^2/s) per heightmap node along the surface wind, none where
    the surface lies below ``bubble_top`` (see the reference)."""
    ny, nx = has_surface.shape
    wny, wnx = wind_x.shape
    f = np.float32
    shelter = bubble_top is not None
    if not shelter:
        height = snow_depth = bubble_top = flux_x   # never read
    _kernel("saltation_flux")(blocks(nx * ny), (LAUNCH_BLOCK,), (
        wind_x, wind_y, np.int32(wnx), np.int32(wny), f(column_x0), f(column_y0), f(cell_size),
        f(hx0), f(hy0), f(spacing), has_surface, f(ustar_per_speed), f(threshold),
        f(flux_scale), f(heading_x), f(heading_y), flux_x, flux_y, np.int32(nx), np.int32(ny),
        np.int32(shelter), height, snow_depth, bubble_top))


def drift_transport(flux_x, flux_y, height, has_surface, snow_depth, courant, max_rise,
                    snow_out, downwind_axis=-1, wrap=None, boundary=0, inflow_limit=0.0,
                    books=None):
    """One pairwise transport step into snow_out; the grid wraps around, the downwind
    edges' inflow spread evenly with ``downwind_axis`` 0 or 1, in the same launch, or those
    edges open with ``boundary`` OPEN_SNOWFIELD or BARE_GROUND, their inflow and outflow
    added to ``books`` (float64 (2,)) in the same launch (see the reference; ``wrap`` of
    ``wrap_buffer_size``, its count of finished blocks 0)."""
    ny, nx = snow_depth.shape
    axis = int(downwind_axis) if int(downwind_axis) in (0, 1) else -1
    opened = axis >= 0 and int(boundary) in (OPEN_SNOWFIELD, BARE_GROUND)
    limit = np.float32(inflow_limit) if int(boundary) == OPEN_SNOWFIELD else np.float32(0.0)
    if axis < 0:
        wrap = snow_depth          # not read
    if not opened:
        books = snow_depth         # not read (nor written)
    # the last block's tail takes one thread per partial sum
    _kernel("drift_transport")(((nx * ny + WRAP_THREADS - 1) // WRAP_THREADS,), (WRAP_THREADS,), (
        flux_x, flux_y, height, has_surface, snow_depth, np.float32(courant),
        np.float32(max_rise), snow_out, np.int32(nx), np.int32(ny), np.int32(axis), wrap,
        np.int32(opened), limit, books))


def column_surface(height, snow_depth, has_surface, hx0, hy0, spacing, x0, y0, cell_size,
                   surface_out):
    """Highest surface (m) of the heightmap nodes in each wind column (see the reference)."""
    ny, nx = height.shape
    wny, wnx = surface_out.shape
    f = np.float32
    _kernel("column_surface")(blocks(wnx * wny), (LAUNCH_BLOCK,), (
        height, snow_depth, has_surface, np.int32(nx), np.int32(ny), f(hx0), f(hy0),
        f(spacing), f(x0), f(y0), f(cell_size), surface_out, np.int32(wnx), np.int32(wny)))


def separation_bubble(column_height, x0, y0, cell_size, heading_x, heading_y, slope, rise,
                      edge, spread, max_distance, bubble_top):
    """Top (m) of the lee's separation bubble over each wind column (see the reference)."""
    ny, nx = column_height.shape
    f = np.float32
    _kernel("separation_bubble")(blocks(nx * ny), (LAUNCH_BLOCK,), (
        column_height, np.int32(nx), np.int32(ny), f(x0), f(y0), f(cell_size), f(heading_x),
        f(heading_y), f(slope), f(rise), f(edge), f(spread), f(max_distance), bubble_top))


def horseshoe_vortex(column_height, cell_size, heading_x, heading_y, reach, gain, leg,
                     max_cells, scour):
    """Factor (>= 1) on the surface wind from the horseshoe vortex at the windward base of
    bluff obstacles and its legs trailing downwind of their sides, per wind column (see
    the reference)."""
    ny, nx = column_height.shape
    f = np.float32
    _kernel("horseshoe_vortex")(blocks(nx * ny), (LAUNCH_BLOCK,), (
        column_height, np.int32(nx), np.int32(ny), f(cell_size), f(heading_x), f(heading_y),
        f(reach), f(gain), f(leg), np.int32(max_cells), scour))
