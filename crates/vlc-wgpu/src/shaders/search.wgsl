// Batched inverted-list search, one workgroup per query: rank the anchors, scan the probed lists
// with the primary code, keep a candidate pool, rescore it with the second stage, top k; with
// the automatic pool, then rescore the scanned candidates beyond it that the first stage's error
// may have pushed out. The same steps and estimators as the CUDA kernel (vlc-cuda
// kernels/search.cu) and the CPU search (vlc-core src/search.rs), in f32.
//
// Two tiled matrix products run first, over the whole batch, as CUDA's two cuBLAS GEMMs do:
// `query_dots` (query . anchor for every anchor) and `rotate_queries` (the RaBitQ or pcaq query
// rotation). They write into each query's slice of `scratch`, so `search_queries` reads the dot
// products and the rotated query instead of forming them one query per workgroup.
//
// Candidates are ordered by a 64-bit key held as two u32 words: the distance's bits made
// order-preserving (`ordered`) in the high word, the list position (or anchor id) in the low
// word, as `vlc::linalg::order_key`; so ties resolve by position, as on the CPU. Thresholds are
// kept as ordered words too, so no shader value is ever an infinity.
//
// The pool has `cap` slots (a power of two, at least keep + WG), in workgroup memory up to 1,024
// slots (`POOL_SLOTS`), else in this workgroup's slice of `scratch`. Each round every
// invocation scores at most one item and appends it when it beats the threshold; when fewer
// than WG free slots are left the workgroup sorts the pool (bitonic), keeps the best `keep` and
// tightens the threshold to the worst kept distance.

const WG: u32 = 256u;
const KIND_NONE: u32 = 0u;
const KIND_ANCHOR_ONLY: u32 = 1u;
const KIND_RABITQ: u32 = 2u;
const KIND_SCALAR: u32 = 3u;
const KIND_PCA: u32 = 4u;
const KIND_FLOAT: u32 = 5u;

struct Params {
    rows: u32,
    num_anchors: u32,
    dim: u32,
    padded_dim: u32,
    nprobe: u32,
    pool_size: u32,
    k: u32,
    cap: u32,
    kind1: u32,
    bits1: u32,
    code_size1: u32,
    per_anchor1: u32,
    kind2: u32,
    bits2: u32,
    code_size2: u32,
    per_anchor2: u32,
    // Offsets (in floats) into `floats` of: anchor norms, rotation, scalar lo/step per stage.
    off_norms: u32,
    off_rotation: u32,
    off_lo1: u32,
    off_step1: u32,
    off_lo2: u32,
    off_step2: u32,
    // u32 words of `scratch` per workgroup.
    stride: u32,
    // Offset of the caller ids in `lists` (after the num_anchors + 1 list offsets).
    off_ids: u32,
    // Adaptive probing (SearchParams::lists_to_scan): 1 when on, with margin x energy (finite).
    adaptive: u32,
    probe_margin: f32,
    // pcaq (kind1 == KIND_PCA): offset in `floats` of its top-bit weights, first-stage and
    // full-code grid-centre offsets ((padded_dim,) each), then its plane counts E and L and
    // the dimensions of each plane (E + L), as vlc's StageCodec::Pca; and 2 / sqrt(active).
    off_pca: u32,
    pca_scale: f32,
    // u32 words of each pool array in `scratch`: `cap`, or 0 with the pool in workgroup memory.
    pool_words: u32,
    // The automatic pool (vlc's SearchParams::automatic_pool): vlc's ERROR_MARGIN; 0 for a
    // fixed pool.
    error_margin: f32,
    // Invocations that score one second-stage code together: a power of two, at most 32.
    group: u32,
    // A filtered search: FILTER_PROBES, with the lists each query probes ranked on the host
    // (vlc's DeviceFilter; `nprobe` is then the most lists a query of the dispatch probes);
    // FILTER_RANKED, with the lists ranked here among those holding an allowed vector (vlc's
    // DeviceFilterLists; `nprobe` is then the lists to rank); the filter's allowed vectors in
    // `allowed`, and the probes in `queries` past the queries (see there). FILTER_NONE
    // otherwise.
    filtered: u32,
    // Word offsets in `queries` of this dispatch's first query's probe offset and of the
    // probed anchors (then as many distances); and the probes in all.
    off_probes: u32,
    off_probe_anchors: u32,
    probe_count: u32,
    // FILTER_RANKED: the lists' worth to take (vlc's nprobe) and how many lists hold an
    // allowed vector.
    nprobe_target: u32,
    lists_with_allowed: u32,
}

const FILTER_NONE: u32 = 0u;
const FILTER_PROBES: u32 = 1u;
const FILTER_RANKED: u32 = 2u;
// The distance word of a FILTER_RANKED row whose ranked lists hold too little (its id word
// pads): the host ranks its lists and searches it again. A NaN's bits, which no distance has.
const RANK_ON_HOST: u32 = 0xffffffffu;

@group(0) @binding(0) var<uniform> p: Params;
// (num_anchors, dim), row-major.
@group(0) @binding(1) var<storage, read> anchors: array<f32>;
// Anchor norms (num_anchors,), rotation (dim, padded_dim) row-major, scalar ranges per stage
// ((rows, dim) each), at the offsets in `p`.
@group(0) @binding(2) var<storage, read> floats: array<f32>;
// List offsets (num_anchors + 1,), then caller ids in list order (num_vectors,).
@group(0) @binding(3) var<storage, read> lists: array<u32>;
// (rows, dim) f32 bits, prepared (normalised for the cosine metric). With FILTER_PROBES, then
// the probe offsets of every query of the batch (query i's lists are entries
// offsets[i] .. offsets[i + 1] of the anchors; this dispatch's first query's at
// `off_probes`), the probed anchors (`probe_count`, nearest first per query, at
// `off_probe_anchors`) and their squared distances' bits (as many, after them). Words
// rather than f32, so that a bit pattern read back is never a float load
// (no NaN or subnormal can be altered).
@group(0) @binding(4) var<storage, read> queries: array<u32>;
// Primary and second-stage codes, bytes packed little-endian in words.
@group(0) @binding(5) var<storage, read> codes1: array<u32>;
@group(0) @binding(6) var<storage, read> codes2: array<u32>;
// (rows, k) ids (0xffffffff pads), then (rows, k) distance bits.
@group(0) @binding(7) var<storage, read_write> out: array<u32>;
// Per workgroup, `stride` words: keys high, keys low, aux (`pool_words` each), probe anchors
// (nprobe), probe distances (nprobe), probe list starts (nprobe), prefix sums of the probe
// sizes (nprobe + 1), rotated query (padded_dim), RaBitQ table (4 * padded_dim; pcaq: a table
// weighted by each dimension's top bit, then a plain one, 4 * padded_dim each), query . anchor
// (num_anchors). See `slice_layout`.
@group(0) @binding(8) var<storage, read_write> scratch: array<u32>;
// A filtered search's allowed vectors (vlc's AllowedByList): list starts (num_anchors + 1:
// list a's are entries starts[a] .. starts[a + 1] of the positions), each list's share of
// allowed vectors (num_anchors: vlc's list_share), then their list positions, ascending.
// Unread without a filter. A buffer of its own, so that the searches of one filter upload it
// once.
@group(0) @binding(9) var<storage, read> allowed: array<u32>;

var<workgroup> pool_count: atomic<u32>;
var<workgroup> count_plain: u32;
var<workgroup> threshold: u32;
var<workgroup> total_plain: u32;
// FILTER_RANKED: the ranked lists a query probes, or 0xffffffff where the host ranks them.
var<workgroup> lists_taken: u32;
// The automatic pool's margin, or -1 where no candidate beyond the pool can make the top k.
var<workgroup> margin_plain: f32;
// For the automatic pool: the smallest first-stage estimate (its ordered word) of each of the
// first LIST_MIN_SLOTS probed lists, so that step 4 skips the lists where it is too large
// (lists past them are always scored again). Once step 4 has chosen its lists, the same words
// stage the candidates it rescores: their list positions in the first STAGED_SLOTS, their
// probe indices in the next STAGED_SLOTS. The host sets LIST_MIN_SLOTS per pipeline: 1,024
// with the automatic pool, else 1 (step 4 never runs), which leaves 4 KiB of workgroup memory
// free (session 62, H200: a fixed pool searched up to 14% faster so).
override LIST_MIN_SLOTS: u32 = 1024u;
var<workgroup> list_min: array<atomic<u32>, LIST_MIN_SLOTS>;
const STAGED_SLOTS: u32 = 2u * WG;
var<workgroup> staged_count: atomic<u32>;
var<workgroup> staged_plain: u32;
// Sums over the workgroup (`sum_over_workgroup`) and over groups of invocations (`group_sum`).
// (A vec2 per invocation, 1 KiB more, was up to a tenth slower in a scratch build on an H200.)
var<workgroup> partial: array<f32, WG>;

// The candidate pool in workgroup memory: key high words, key low words, aux, `POOL_SLOTS`
// each. The host sets `POOL_SLOTS` per pipeline (see `WgpuIndex::pool_in_workgroup_memory`):
// to `cap` where the pool (12 bytes a slot) takes at most 12 KiB and fits the adapter's
// workgroup memory; otherwise to the default 1, and the pool lives in this workgroup's slice
// of `scratch`.
override POOL_SLOTS: u32 = 1u;
override POOL_IN_WORKGROUP: bool = POOL_SLOTS > 1u;
var<workgroup> pool_hi: array<u32, POOL_SLOTS>;
var<workgroup> pool_lo: array<u32, POOL_SLOTS>;
var<workgroup> pool_aux: array<u32, POOL_SLOTS>;

fn get_hi(i: u32) -> u32 {
    if (POOL_IN_WORKGROUP) {
        return pool_hi[i];
    }
    return scratch[key_hi + i];
}

fn get_lo(i: u32) -> u32 {
    if (POOL_IN_WORKGROUP) {
        return pool_lo[i];
    }
    return scratch[key_lo + i];
}

fn get_aux(i: u32) -> u32 {
    if (POOL_IN_WORKGROUP) {
        return pool_aux[i];
    }
    return scratch[aux + i];
}

fn set_hi(i: u32, v: u32) {
    if (POOL_IN_WORKGROUP) {
        pool_hi[i] = v;
    } else {
        scratch[key_hi + i] = v;
    }
}

fn set_lo(i: u32, v: u32) {
    if (POOL_IN_WORKGROUP) {
        pool_lo[i] = v;
    } else {
        scratch[key_lo + i] = v;
    }
}

fn set_aux(i: u32, v: u32) {
    if (POOL_IN_WORKGROUP) {
        pool_aux[i] = v;
    } else {
        scratch[aux + i] = v;
    }
}

// Make every invocation's pool writes visible to the workgroup (and wait for all of them).
fn pool_barrier() {
    if (POOL_IN_WORKGROUP) {
        workgroupBarrier();
    } else {
        storageBarrier();
    }
}

// The same for the pool and the workgroup's pool state (count, threshold).
fn pool_state_barrier() {
    workgroupBarrier();
    if (!POOL_IN_WORKGROUP) {
        storageBarrier();
    }
}

// Offsets of this workgroup's arrays in `scratch`, and of its query in `queries`.
var<private> key_hi: u32;
var<private> key_lo: u32;
var<private> aux: u32;
var<private> probe_anchor: u32;
var<private> probe_dist: u32;
var<private> probe_start: u32;
var<private> prefix: u32;
var<private> rotated: u32;
var<private> table: u32;
var<private> dots: u32;
var<private> query_at: u32;

// Dimension `d` of this workgroup's query.
fn query_value(d: u32) -> f32 {
    return bitcast<f32>(queries[query_at + d]);
}

// Set the offsets above for workgroup slice `query` (the host's `stride` is the same sum).
fn slice_layout(query: u32) {
    key_hi = query * p.stride;
    key_lo = key_hi + p.pool_words;
    aux = key_lo + p.pool_words;
    probe_anchor = aux + p.pool_words;
    probe_dist = probe_anchor + p.nprobe;
    probe_start = probe_dist + p.nprobe;
    prefix = probe_start + p.nprobe;
    rotated = prefix + p.nprobe + 1u;
    table = rotated + p.padded_dim;
    dots = table + select(1u, 2u, p.kind1 == KIND_PCA) * 4u * p.padded_dim;
    query_at = query * p.dim;
}

// Set by the host where the primary code is scalar with global ranges (`WgpuIndex::weighted`):
// it is scored against the weights q ∘ step1 in workgroup memory (`weight`, WEIGHT_SLOTS = dim
// of them) and <q, lo1> (the CPU's `prepare_query`), a level costing one weight and one
// multiply-add instead of the query, its range and its step. Pipeline constants, so that the
// other pipelines carry none of it (WEIGHT_SLOTS is 1 there).
override WEIGHTED: bool = false;
override WEIGHT_SLOTS: u32 = 1u;
var<workgroup> weight: array<f32, WEIGHT_SLOTS>;

// Query-side matrix products: a 64 x 64 tile of (query, column) results per workgroup of
// 16 x 16 invocations, each invocation 4 x 4 of them (rows ly + 16i, columns lx + 16j), over
// depth slices of 16 staged in workgroup memory. Layout of both stages: (16, 64), depth-major.
const TILE: u32 = 64u;
const DEPTH: u32 = 16u;
var<workgroup> tile_q: array<f32, 1024>;
var<workgroup> tile_b: array<f32, 1024>;

// Write query . column into each query's slice (`dots` for anchors, `rotated` otherwise), for
// the columns of (num_anchors, dim) `anchors` (by_anchor) or of the (dim, padded_dim) rotation.
fn query_products(wg: vec3<u32>, l: vec3<u32>, by_anchor: bool) {
    let tid = l.y * 16u + l.x;
    let m0 = wg.y * TILE;
    let n0 = wg.x * TILE;
    let cols = select(p.padded_dim, p.num_anchors, by_anchor);
    // acc_i[j]: query row ly + 16i, column lx + 16j (vectors with constant indices stay in
    // registers, where a dynamically indexed array would not).
    var acc0 = vec4<f32>();
    var acc1 = vec4<f32>();
    var acc2 = vec4<f32>();
    var acc3 = vec4<f32>();
    for (var k0 = 0u; k0 < p.dim; k0 = k0 + DEPTH) {
        for (var i = 0u; i < 4u; i = i + 1u) {
            let e = tid + i * 256u;
            // Queries and anchors are read along their rows (16 consecutive dimensions).
            let r = e / DEPTH;
            let d = e % DEPTH;
            let k = k0 + d;
            var q = 0.0;
            if (m0 + r < p.rows && k < p.dim) {
                q = bitcast<f32>(queries[(m0 + r) * p.dim + k]);
            }
            tile_q[d * TILE + r] = q;
            var b = 0.0;
            if (by_anchor) {
                if (n0 + r < cols && k < p.dim) {
                    b = anchors[(n0 + r) * p.dim + k];
                }
                tile_b[d * TILE + r] = b;
            } else {
                // The rotation is read along its rows (64 consecutive columns).
                let rd = e / TILE;
                let c = e % TILE;
                if (n0 + c < cols && k0 + rd < p.dim) {
                    b = floats[p.off_rotation + (k0 + rd) * p.padded_dim + n0 + c];
                }
                tile_b[rd * TILE + c] = b;
            }
        }
        workgroupBarrier();
        for (var d = 0u; d < DEPTH; d = d + 1u) {
            let at = d * TILE;
            let b = vec4<f32>(tile_b[at + l.x], tile_b[at + l.x + 16u], tile_b[at + l.x + 32u],
                              tile_b[at + l.x + 48u]);
            acc0 = acc0 + tile_q[at + l.y] * b;
            acc1 = acc1 + tile_q[at + l.y + 16u] * b;
            acc2 = acc2 + tile_q[at + l.y + 32u] * b;
            acc3 = acc3 + tile_q[at + l.y + 48u] * b;
        }
        workgroupBarrier();
    }
    store_products(m0 + l.y, n0 + l.x, cols, by_anchor, acc0);
    store_products(m0 + l.y + 16u, n0 + l.x, cols, by_anchor, acc1);
    store_products(m0 + l.y + 32u, n0 + l.x, cols, by_anchor, acc2);
    store_products(m0 + l.y + 48u, n0 + l.x, cols, by_anchor, acc3);
}

// Columns n, n + 16, n + 32, n + 48 of query row m, into its slice.
fn store_products(m: u32, n: u32, cols: u32, by_anchor: bool, v: vec4<f32>) {
    if (m >= p.rows) {
        return;
    }
    slice_layout(m);
    let at = select(rotated, dots, by_anchor);
    for (var j = 0u; j < 4u; j = j + 1u) {
        if (n + 16u * j < cols) {
            scratch[at + n + 16u * j] = bitcast<u32>(v[j]);
        }
    }
}

@compute @workgroup_size(16, 16)
fn query_dots(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_id) l: vec3<u32>) {
    query_products(wg, l, true);
}

@compute @workgroup_size(16, 16)
fn rotate_queries(@builtin(workgroup_id) wg: vec3<u32>,
                  @builtin(local_invocation_id) l: vec3<u32>) {
    query_products(wg, l, false);
}

fn ordered(d: f32) -> u32 {
    let b = bitcast<u32>(d);
    if ((b & 0x80000000u) != 0u) {
        return ~b;
    }
    return b | 0x80000000u;
}

fn unordered(k: u32) -> f32 {
    if ((k & 0x80000000u) != 0u) {
        return bitcast<f32>(k & 0x7fffffffu);
    }
    return bitcast<f32>(~k);
}

// Whether key (ah, al) sorts after key (bh, bl).
fn after(ah: u32, al: u32, bh: u32, bl: u32) -> bool {
    return ah > bh || (ah == bh && al > bl);
}

fn sum_over_workgroup(v: f32, tid: u32) -> f32 {
    return group_sum(v, tid, tid, WG);
}

// The sum of `v` over the `group` invocations (a power of two) tid - lane .. tid - lane + group
// - 1, for each of them: a tree in a fixed order, which gives the sum that CUDA's shuffles
// (xor butterfly) give. Called by the whole workgroup, in uniform control flow.
fn group_sum(v: f32, tid: u32, lane: u32, group: u32) -> f32 {
    if (group == 1u) {
        return v;
    }
    partial[tid] = v;
    workgroupBarrier();
    for (var o = group >> 1u; o > 0u; o = o >> 1u) {
        if (lane < o) {
            partial[tid] = partial[tid] + partial[tid + o];
        }
        workgroupBarrier();
    }
    let r = partial[tid - lane];
    workgroupBarrier();
    return r;
}

// Sort the pool's `n` keys (a power of two) ascending, carrying aux along.
fn bitonic_sort(n: u32, tid: u32) {
    for (var size = 2u; size <= n; size = size << 1u) {
        for (var stride = size >> 1u; stride > 0u; stride = stride >> 1u) {
            for (var i = tid; i < (n >> 1u); i = i + WG) {
                // 2 stride (i / stride) + i % stride, by masks (stride is a power of two).
                let lo = ((i & ~(stride - 1u)) << 1u) | (i & (stride - 1u));
                let hi = lo + stride;
                let ascending = (lo & size) == 0u;
                let ah = get_hi(lo);
                let al = get_lo(lo);
                let bh = get_hi(hi);
                let bl = get_lo(hi);
                if (after(ah, al, bh, bl) == ascending) {
                    set_hi(lo, bh);
                    set_lo(lo, bl);
                    set_hi(hi, ah);
                    set_lo(hi, al);
                    let t = get_aux(lo);
                    set_aux(lo, get_aux(hi));
                    set_aux(hi, t);
                }
            }
            pool_barrier();
        }
    }
}

// Sort the pool and keep its best `keep`; called by the whole workgroup with `count_plain`
// current. Only the occupied slots, padded to a power of two (at most `p.cap`), are sorted:
// the last compactions of a query hold far fewer entries than the pool's capacity. With
// `outside`, each entry dropped lowers its probe's `list_min` word to its key's high word.
fn compact(keep: u32, tid: u32, outside: bool) {
    let c = workgroupUniformLoad(&count_plain);
    let n = select(1u, 1u << (32u - countLeadingZeros(c - 1u)), c > 1u);
    for (var i = c + tid; i < n; i = i + WG) {
        set_hi(i, 0xffffffffu);
        set_lo(i, 0xffffffffu);
    }
    pool_barrier();
    bitonic_sort(n, tid);
    if (outside) {
        for (var i = keep + tid; i < c; i = i + WG) {
            let pr = get_aux(i);
            if (pr < LIST_MIN_SLOTS) {
                atomicMin(&list_min[pr], get_hi(i));
            }
        }
    }
    if (tid == 0u) {
        let kept = min(c, keep);
        atomicStore(&pool_count, kept);
        count_plain = kept;
        threshold = select(0xffffffffu, get_hi(keep - 1u), c >= keep);
    }
    pool_state_barrier();
}

// Offer one scored item to the pool, then compact when the pool is nearly full. Every
// invocation calls it once per round (valid = false for those without an item). With
// `outside` (`tag` a probe index), an item turned away or dropped lowers its probe's
// `list_min` word: at the end each word holds the smallest key (high word) of its list's
// items outside the pool. The pool compacts once more than `cap` less a round's worth of
// slots are taken (`cap` a power of two, at most `p.cap`).
fn offer(valid: bool, d: f32, id: u32, tag: u32, keep: u32, cap: u32, tid: u32, outside: bool) {
    let key = ordered(d);
    if (valid && key < threshold) {
        let slot = atomicAdd(&pool_count, 1u);
        set_hi(slot, key);
        set_lo(slot, id);
        set_aux(slot, tag);
    } else if (valid && outside && tag < LIST_MIN_SLOTS) {
        atomicMin(&list_min[tag], key);
    }
    pool_state_barrier();
    if (tid == 0u) {
        count_plain = atomicLoad(&pool_count);
    }
    let c = workgroupUniformLoad(&count_plain);
    if (c > cap - WG) {
        compact(keep, tid, outside);
    }
}

fn reset_pool(tid: u32) {
    if (tid == 0u) {
        atomicStore(&pool_count, 0u);
        count_plain = 0u;
        threshold = 0xffffffffu;
    }
    workgroupBarrier();
}

fn code_word(stage: u32, w: u32) -> u32 {
    if (stage == 1u) {
        return codes1[w];
    }
    return codes2[w];
}

fn code_byte(stage: u32, o: u32) -> u32 {
    return (code_word(stage, o >> 2u) >> ((o & 3u) * 8u)) & 0xffu;
}

fn code_f32(stage: u32, o: u32) -> f32 {
    let b = code_byte(stage, o) | (code_byte(stage, o + 1u) << 8u) | (code_byte(stage, o + 2u) << 16u)
        | (code_byte(stage, o + 3u) << 24u);
    return bitcast<f32>(b);
}

fn table_at(i: u32) -> f32 {
    return bitcast<f32>(scratch[table + i]);
}

// The eight nibble lookups of one code word whose four bytes' tables start `t` words into the
// tables: byte b's low nibble in table row t + 32b, its high nibble in row t + 32b + 16.
fn word_sum(w: u32, t: u32) -> f32 {
    return table_at(t + (w & 15u)) + table_at(t + 16u + ((w >> 4u) & 15u))
        + table_at(t + 32u + ((w >> 8u) & 15u)) + table_at(t + 48u + ((w >> 12u) & 15u))
        + table_at(t + 64u + ((w >> 16u) & 15u)) + table_at(t + 80u + ((w >> 20u) & 15u))
        + table_at(t + 96u + ((w >> 24u) & 15u)) + table_at(t + 112u + (w >> 28u));
}

// One invocation's share of the sum over the `nb` bytes of one bit plane starting at byte
// `start` of table[2i][low nibble] + table[2i+1][high nibble], the table `tab` words into the
// tables: the plane's words (or bytes) `first`, `first + stride`, ... (0 and 1: all of them).
// A plane on word boundaries (every pcaq plane; RaBitQ's where the code size and the plane are
// multiples of 4 bytes) takes the word loop, one per code buffer.
fn plane_sum(stage: u32, start: u32, nb: u32, tab: u32, first: u32, stride: u32) -> f32 {
    if (((start | nb) & 3u) == 0u) {
        let w0 = start >> 2u;
        let nw = nb >> 2u;
        var s = 0.0;
        if (stage == 1u) {
            for (var i = first; i < nw; i = i + stride) {
                s = s + word_sum(codes1[w0 + i], tab + i * 128u);
            }
        } else {
            for (var i = first; i < nw; i = i + stride) {
                s = s + word_sum(codes2[w0 + i], tab + i * 128u);
            }
        }
        return s;
    }
    var s = 0.0;
    if (stride > 1u) {
        for (var i = first; i < nb; i = i + stride) {
            let byte = code_byte(stage, start + i);
            let t = tab + i * 32u;
            s = s + table_at(t + (byte & 15u)) + table_at(t + 16u + (byte >> 4u));
        }
        return s;
    }
    // A lone invocation reads each word once for its up to four bytes.
    var i = 0u;
    loop {
        if (i >= nb) {
            break;
        }
        let o = start + i;
        let w = code_word(stage, o >> 2u);
        let lead = o & 3u;
        let n = min(4u - lead, nb - i);
        for (var b = 0u; b < n; b = b + 1u) {
            let byte = (w >> ((lead + b) * 8u)) & 0xffu;
            let t = tab + (i + b) * 32u;
            s = s + table_at(t + (byte & 15u)) + table_at(t + 16u + (byte >> 4u));
        }
        i = i + n;
    }
    return s;
}

// An IEEE half's bits to f32, subnormals included, by bit operations: `unpack2x16float` would
// need the SHADER_FLOAT16_IN_FLOAT32 capability, which not every adapter has.
fn half_to_f32(h: u32) -> f32 {
    let sign = (h & 0x8000u) << 16u;
    let e = (h >> 10u) & 0x1fu;
    let m = h & 0x3ffu;
    if (e == 0u) {
        return bitcast<f32>(sign | bitcast<u32>(f32(m) * 5.9604645e-8));
    }
    if (e == 31u) {
        return bitcast<f32>(sign | 0x7f800000u | (m << 13u));
    }
    return bitcast<f32>(sign | ((e + 112u) << 23u) | (m << 13u));
}

fn pca_dims(i: u32) -> u32 {
    return u32(floats[p.off_pca + 3u * p.padded_dim + i]);
}

// One invocation's share of an estimate, which is `outer + scale * (inner + sum)`, `sum` being
// `share` summed over the invocations that score the code together (for a lone invocation, its
// own share): CUDA's `score` in the same terms (a full pcaq code's two table sums are added per
// invocation here, and summed apart there).
struct Share {
    share: f32,
    inner: f32,
    outer: f32,
    scale: f32,
}

fn finish(s: Share, sum: f32) -> f32 {
    return s.outer + s.scale * (s.inner + sum);
}

// pcaq (vlc's StageCodec::Pca, whose planes and factors start on 4-byte boundaries): the first
// stage reads the sign plane and the planes below it against the top-bit table (plane j below
// the sign at 2^-(j+1)), the full code adds the remaining planes against the plain table (plane
// j at 2^j). The share: the top-bit table's sum, plus the plain table's for the full code.
fn score_pca(stage: u32, full: bool, start: u32, anchor_dist: f32, constant1: f32,
             constant2: f32, first: u32, stride: u32) -> Share {
    let e = pca_dims(0u);
    let l = pca_dims(1u);
    var at = p.padded_dim / 8u;
    var top = plane_sum(stage, start, at, 0u, first, stride);
    for (var j = 0u; j < e; j = j + 1u) {
        let n = (pca_dims(2u + j) + 31u) / 32u * 4u;
        top = top + ldexp(plane_sum(stage, start + at, n, 0u, first, stride), -i32(j + 1u));
        at = at + n;
    }
    if (!full) {
        return Share(top, constant1, anchor_dist + code_f32(stage, start + at),
                     code_f32(stage, start + at + 4u));
    }
    at = at + 8u;
    var low = 0.0;
    for (var j = 0u; j < l; j = j + 1u) {
        let n = (pca_dims(2u + e + j) + 31u) / 32u * 4u;
        low = low + f32(1u << j) * plane_sum(stage, start + at, n, 4u * p.padded_dim, first, stride);
        at = at + n;
    }
    return Share(top + low, constant2, anchor_dist + code_f32(stage, start + at),
                 code_f32(stage, start + at + 4u));
}

// One invocation's share of the estimated squared distance of the code at list position
// `position` (see the codec docs in vlc-core): its words, bytes or dimensions `first`, `first +
// stride`, ... (0 and 1: all of them). `full`: for RaBitQ, all bits (else only the leading
// 1-bit code); for pcaq, the full code (else its first stage).
fn score_share(stage: u32, full: bool, position: u32, anchor: u32, anchor_dist: f32,
               constant: f32, constant2: f32, first: u32, stride: u32) -> Share {
    var kind = p.kind1;
    var bits = p.bits1;
    var code_size = p.code_size1;
    var per_anchor = p.per_anchor1;
    var off_lo = p.off_lo1;
    var off_step = p.off_step1;
    if (stage == 2u) {
        kind = p.kind2;
        bits = p.bits2;
        code_size = p.code_size2;
        per_anchor = p.per_anchor2;
        off_lo = p.off_lo2;
        off_step = p.off_step2;
    }
    if (kind == KIND_ANCHOR_ONLY) {
        return Share(0.0, 0.0, anchor_dist, 0.0);
    }
    let start = position * code_size;
    if (kind == KIND_PCA) {
        return score_pca(stage, full && bits > 1u, start, anchor_dist, constant, constant2, first,
                         stride);
    }
    if (kind == KIND_RABITQ) {
        let nb = (p.dim + 7u) / 8u;
        var inner: f32;
        var planes: f32;
        var at: u32;
        if (!full || bits == 1u) {
            inner = constant;
            planes = plane_sum(stage, start, nb, 0u, first, stride);
            at = nb;
        } else {
            let low = bits - 1u;
            let ex = nb + 8u;
            inner = f32((1u << bits) - 1u) * constant;
            planes = f32(1u << low) * plane_sum(stage, start, nb, 0u, first, stride);
            for (var j = 0u; j < low; j = j + 1u) {
                planes = planes + f32(1u << j) * plane_sum(stage, start + ex + j * nb, nb, 0u, first,
                                                           stride);
            }
            at = ex + low * nb;
        }
        return Share(planes, inner, anchor_dist + code_f32(stage, start + at),
                     code_f32(stage, start + at + 4u));
    }
    // One invocation reads a whole code whose rows start on 4-byte boundaries a word at a time
    // (four sq8 levels, eight sq4 levels, two halves or a float), in the same order and sums as
    // byte by byte, which read the same word once per byte (CUDA's scan of sq8 codes by lone
    // threads waited on such loads, session 73). Invocations that share a code read it byte
    // by byte.
    let whole = stride == 1u && (code_size & 3u) == 0u;
    let word0 = start >> 2u;
    if (kind == KIND_FLOAT) {
        // Float residuals: distance = |q - c|^2 + factor - 2 <q, r>, r stored as is.
        var ip = 0.0;
        var d = first;
        if (bits == 16u) {
            if (whole) {
                for (; d + 2u <= p.dim; d = d + 2u) {
                    let v = code_word(stage, word0 + (d >> 1u));
                    ip = ip + query_value(d) * half_to_f32(v & 0xffffu);
                    ip = ip + query_value(d + 1u) * half_to_f32(v >> 16u);
                }
            }
            for (; d < p.dim; d = d + stride) {
                let o = start + 2u * d;
                let h = code_byte(stage, o) | (code_byte(stage, o + 1u) << 8u);
                ip = ip + query_value(d) * half_to_f32(h);
            }
        } else {
            if (whole) {
                for (; d < p.dim; d = d + 1u) {
                    ip = ip + query_value(d) * bitcast<f32>(code_word(stage, word0 + d));
                }
            }
            for (; d < p.dim; d = d + stride) {
                ip = ip + query_value(d) * code_f32(stage, start + 4u * d);
            }
        }
        return Share(ip, 0.0, anchor_dist + code_f32(stage, start + (bits / 8u) * p.dim), -2.0);
    }
    // Scalar: r = lo + step * level; distance = |q - c|^2 + factor - 2 <q, r>, where <q, r>
    // is `constant` plus the weighted levels for the primary code with global ranges.
    let row = select(0u, anchor * p.dim, per_anchor != 0u);
    let weighted = stage == 1u && WEIGHTED;
    var ip = 0.0;
    var packed: u32;
    var d = first;
    if (bits == 8u) {
        if (whole) {
            // Four words loaded before any is used, so that four loads are in flight (the
            // word loop below waited on each in turn: session 79); the same order of sums.
            for (; d + 16u <= p.dim; d = d + 16u) {
                let w = word0 + (d >> 2u);
                let v0 = code_word(stage, w);
                let v1 = code_word(stage, w + 1u);
                let v2 = code_word(stage, w + 2u);
                let v3 = code_word(stage, w + 3u);
                ip = add_byte_levels(ip, v0, weighted, d, row, off_lo, off_step);
                ip = add_byte_levels(ip, v1, weighted, d + 4u, row, off_lo, off_step);
                ip = add_byte_levels(ip, v2, weighted, d + 8u, row, off_lo, off_step);
                ip = add_byte_levels(ip, v3, weighted, d + 12u, row, off_lo, off_step);
            }
            for (; d + 4u <= p.dim; d = d + 4u) {
                let v = code_word(stage, word0 + (d >> 2u));
                ip = add_byte_levels(ip, v, weighted, d, row, off_lo, off_step);
            }
        }
        for (; d < p.dim; d = d + stride) {
            let level = f32(code_byte(stage, start + d));
            ip = ip + level_term(weighted, d, row, off_lo, off_step, level);
        }
        packed = p.dim;
    } else {
        if (whole) {
            // Four words at a time, as for sq8 above.
            for (; d + 32u <= p.dim; d = d + 32u) {
                let w = word0 + (d >> 3u);
                let v0 = code_word(stage, w);
                let v1 = code_word(stage, w + 1u);
                let v2 = code_word(stage, w + 2u);
                let v3 = code_word(stage, w + 3u);
                ip = add_nibble_levels(ip, v0, weighted, d, row, off_lo, off_step);
                ip = add_nibble_levels(ip, v1, weighted, d + 8u, row, off_lo, off_step);
                ip = add_nibble_levels(ip, v2, weighted, d + 16u, row, off_lo, off_step);
                ip = add_nibble_levels(ip, v3, weighted, d + 24u, row, off_lo, off_step);
            }
            for (; d + 8u <= p.dim; d = d + 8u) {
                let v = code_word(stage, word0 + (d >> 3u));
                ip = add_nibble_levels(ip, v, weighted, d, row, off_lo, off_step);
            }
        }
        for (; d < p.dim; d = d + stride) {
            let level = f32((code_byte(stage, start + (d >> 1u)) >> ((d & 1u) * 4u)) & 15u);
            ip = ip + level_term(weighted, d, row, off_lo, off_step, level);
        }
        packed = (p.dim + 1u) / 2u;
    }
    return Share(ip, select(0.0, constant, weighted), anchor_dist + code_f32(stage, start + packed),
                 -2.0);
}

// `ip` plus the terms of the four sq8 levels of word `v` (dimensions `e` to `e` + 3), in order.
fn add_byte_levels(ip: f32, v: u32, weighted: bool, e: u32, row: u32, off_lo: u32,
                   off_step: u32) -> f32 {
    var sum = ip;
    for (var b = 0u; b < 4u; b = b + 1u) {
        let level = f32((v >> (8u * b)) & 0xffu);
        sum = sum + level_term(weighted, e + b, row, off_lo, off_step, level);
    }
    return sum;
}

// `ip` plus the terms of the eight sq4 levels of word `v` (dimensions `e` to `e` + 7), in order.
fn add_nibble_levels(ip: f32, v: u32, weighted: bool, e: u32, row: u32, off_lo: u32,
                     off_step: u32) -> f32 {
    var sum = ip;
    for (var b = 0u; b < 8u; b = b + 1u) {
        let level = f32((v >> (4u * b)) & 15u);
        sum = sum + level_term(weighted, e + b, row, off_lo, off_step, level);
    }
    return sum;
}

// Level `level` of dimension `d` against the query: q[d] * level with the weights (`weighted`,
// see `WEIGHTED`), else q[d] * (lo[d] + step[d] * level) with the ranges at row `row`.
fn level_term(weighted: bool, d: u32, row: u32, off_lo: u32, off_step: u32, level: f32) -> f32 {
    if (weighted) {
        return weight[d] * level;
    }
    return query_value(d) * (floats[off_lo + row + d] + floats[off_step + row + d] * level);
}

// The position in the index of item `t` of the flat range over the probed lists that the probe
// prefix sums describe (of `n` lists, the last past `t`), with `pr` moved on (never back) to
// its probed list: the list j with prefix[j] <= t < prefix[j + 1]. A cursor one or two lists
// behind steps on; one further behind (a narrow filter's items, a few in each of thousands of
// lists) searches by halves.
fn locate(t: u32, pr: ptr<function, u32>, n: u32) -> u32 {
    let j = *pr;
    if (scratch[prefix + j + 1u] <= t) {
        if (j + 2u >= n || scratch[prefix + j + 2u] > t) {
            *pr = j + 1u;
        } else {
            var lo = j + 2u;  // prefix[lo] <= t
            var hi = n - 1u;
            while (lo < hi) {
                let mid = (lo + hi + 1u) / 2u;
                if (scratch[prefix + mid] <= t) {
                    lo = mid;
                } else {
                    hi = mid - 1u;
                }
            }
            *pr = lo;
        }
    }
    let entry = scratch[probe_start + *pr] + (t - scratch[prefix + *pr]);
    if (p.filtered != 0u) {
        // A filtered search's range holds its allowed vectors only.
        return allowed[2u * p.num_anchors + 1u + entry];
    }
    return entry;
}

// The first stage's estimate of the vector at `position` of probed list `pr`, by one invocation.
fn first_stage(position: u32, pr: u32, constant: f32, constant2: f32) -> f32 {
    let s = score_share(1u, false, position, scratch[probe_anchor + pr],
                        bitcast<f32>(scratch[probe_dist + pr]), constant, constant2, 0u, 1u);
    return finish(s, s.share);
}

// Invocations that score each of `n` second-stage codes together. Up to WG codes (the pool of
// step 3), the largest group of at most `p.group` (the host's rule by code size) that scores
// them all in one round; more (step 4's staged candidates), `p.group`. Scratch builds on an
// H200 (session 62): `p.group` for the pool too was up to a tenth slower where the pool is
// short and the lists few; one invocation a code throughout, slower still.
fn group_for(n: u32) -> u32 {
    if (n > WG) {
        return p.group;
    }
    var g = p.group;
    while (g > 1u && n * g > WG) {
        g = g >> 1u;
    }
    return g;
}

// The second stage's distance of the vector at `position` of probed list `pr`, by the `group`
// invocations that share it, tid's lane among them being tid % group (each one's share summed
// over the group, so that all of them return the same distance). Called by the whole
// workgroup, in uniform control flow.
fn second_stage(position: u32, pr: u32, constant: f32, constant2: f32, tid: u32,
                group: u32) -> f32 {
    let lane = tid & (group - 1u);
    let s = score_share(2u, true, position, scratch[probe_anchor + pr],
                        bitcast<f32>(scratch[probe_dist + pr]), constant, constant2, lane, group);
    return finish(s, group_sum(s.share, tid, lane, group));
}

// Groups of invocations (`group_for`) rescore the `n` candidates that step 4 staged and offer
// them to the top k, one candidate a group each round; then the staging is emptied. Called by
// the whole workgroup, in uniform control flow.
fn rescore_staged(n: u32, constant: f32, constant2: f32, tid: u32) {
    let group = group_for(n);
    let per_round = WG / group;
    for (var base = 0u; base < n; base = base + per_round) {
        let item = base + tid / group;
        let j = min(item, n - 1u);
        let position = atomicLoad(&list_min[j]);
        let pr = atomicLoad(&list_min[STAGED_SLOTS + j]);
        let dist = second_stage(position, pr, constant, constant2, tid, group);
        offer(item < n && tid % group == 0u, dist, position, pr, p.k, p.cap, tid, false);
    }
    if (tid == 0u) {
        atomicStore(&staged_count, 0u);
    }
    workgroupBarrier();
}

@compute @workgroup_size(256)
fn search_queries(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) tid: u32) {
    let query = wg.x;
    slice_layout(query);

    // 1. The nprobe nearest anchors, by ||q||^2 - 2 q.c + ||c||^2 (q.c from `query_dots`);
    // a filtered search's lists ranked on the host (`np` of them, at most nprobe); or the
    // nprobe nearest of the lists that hold an allowed vector, cut below.
    let filtered = p.filtered != FILTER_NONE;
    let host_probes = p.filtered == FILTER_PROBES;
    var np = p.nprobe;
    var first_probe = 0u;
    if (host_probes) {
        first_probe = queries[p.off_probes + query];
        np = queries[p.off_probes + query + 1u] - first_probe;
    } else {
        var sq = 0.0;
        for (var d = tid; d < p.dim; d = d + WG) {
            let v = query_value(d);
            sq = sq + v * v;
        }
        let qn = sum_over_workgroup(sq, tid);
        reset_pool(tid);
        for (var b = 0u; b < p.num_anchors; b = b + WG) {
            let j = b + tid;
            let valid = j < p.num_anchors &&
                        (!filtered || allowed[j + 1u] > allowed[j]);
            var dist = 0.0;
            if (valid) {
                let dot = bitcast<f32>(scratch[dots + j]);
                dist = max(qn - 2.0 * dot + floats[p.off_norms + j], 0.0);
            }
            offer(valid, dist, j, 0u, p.nprobe, p.cap, tid, false);
        }
        compact(p.nprobe, tid, false);
    }
    if (p.filtered == FILTER_RANKED) {
        // The ranked lists in order until their shares of allowed vectors reach
        // nprobe_target lists' worth (vlc's Index::filtered_probe_count, in the same integer
        // sums, here in two words: `high`, `low`); all of them where they are every list
        // holding one; else the host ranks this query (its row is marked RANK_ON_HOST).
        // A narrow filter ranks thousands of lists, too many for one invocation to load a
        // share at a time: each of up to WG invocations first sums the shares of a run of
        // them (held in the slots of the probes' distances, free until the cut is known:
        // there are nprobe ≥ ranked of them), then invocation 0 adds the runs' sums until
        // the target is reached and walks only the run where it is.
        let ranked = count_plain;
        let lanes = min(WG, ranked);
        let run = (ranked + max(lanes, 1u) - 1u) / max(lanes, 1u);
        if (tid < lanes) {
            var sum = 0u;  // at most run · 2^16: exact below 2^24 ranked lists
            for (var j = tid * run; j < min((tid + 1u) * run, ranked); j = j + 1u) {
                sum = sum + allowed[p.num_anchors + 1u + get_lo(j)];
            }
            scratch[probe_dist + tid] = sum;
        }
        storageBarrier();
        workgroupBarrier();
        if (tid == 0u) {
            let target_high = p.nprobe_target >> 16u;
            let target_low = p.nprobe_target << 16u;
            var high = 0u;
            var low = 0u;
            // Whole runs while the worth after them stays short of the target.
            var l = 0u;
            loop {
                if (l >= lanes) {
                    break;
                }
                let sum = scratch[probe_dist + l];
                let next_low = low + sum;
                let next_high = high + select(0u, 1u, next_low < sum);
                if (next_high > target_high || (next_high == target_high && next_low >= target_low)) {
                    break;
                }
                low = next_low;
                high = next_high;
                l = l + 1u;
            }
            var j = min(l * run, ranked);
            while (j < ranked && !(high > target_high || (high == target_high && low >= target_low))) {
                let share = allowed[p.num_anchors + 1u + get_lo(j)];
                low = low + share;
                high = high + select(0u, 1u, low < share);
                j = j + 1u;
            }
            // Short of the worth after every ranked list: all of them only where they are
            // every list holding one.
            let reached = high > target_high || (high == target_high && low >= target_low);
            lists_taken = select(0xffffffffu, j, reached || ranked >= p.lists_with_allowed);
        }
        np = workgroupUniformLoad(&lists_taken);
        if (np == 0xffffffffu) {
            for (var i = tid; i < p.k; i = i + WG) {
                out[query * p.k + i] = 0xffffffffu;
                out[p.rows * p.k + query * p.k + i] = RANK_ON_HOST;
            }
            return;
        }
    }
    let probed_anchors = p.off_probe_anchors + first_probe;
    for (var i = tid; i < np; i = i + WG) {
        var anchor = 0u;
        if (host_probes) {
            anchor = queries[probed_anchors + i];
            scratch[probe_dist + i] = queries[probed_anchors + p.probe_count + i];
        } else {
            anchor = get_lo(i);
            scratch[probe_dist + i] = bitcast<u32>(unordered(get_hi(i)));
        }
        scratch[probe_anchor + i] = anchor;
        // A probed list's range: its positions, or (filtered) its entries of the allowed
        // vectors' positions.
        if (filtered) {
            scratch[probe_start + i] = allowed[anchor];
            scratch[prefix + i + 1u] = allowed[anchor + 1u] - allowed[anchor];
        } else {
            scratch[probe_start + i] = lists[anchor];
            scratch[prefix + i + 1u] = lists[anchor + 1u] - lists[anchor];
        }
        if (i < LIST_MIN_SLOTS) {
            atomicStore(&list_min[i], 0xffffffffu);
        }
    }
    // The rotated query's (from `rotate_queries`) lookup tables and the grid-centre constants:
    // RaBitQ's -sum(Pq)/sqrt(D); pcaq's first-stage and full-code ones.
    var constant = 0.0;
    var constant2 = 0.0;
    let pca = p.kind1 == KIND_PCA;
    if (p.padded_dim > 0u) {
        let scale = select(2.0 / sqrt(f32(p.dim)), p.pca_scale, pca);
        let n = 4u * p.padded_dim;
        let tables = select(1u, 2u, pca);
        for (var e = tid; e < tables * n; e = e + WG) {
            let g = (e % n) >> 4u;
            let m = e & 15u;
            let weighted = pca && e < n;
            var v = 0.0;
            for (var t = 0u; t < 4u; t = t + 1u) {
                if (((m >> t) & 1u) != 0u) {
                    var w = 1.0;
                    if (weighted) {
                        w = floats[p.off_pca + 4u * g + t];
                    }
                    v = v + bitcast<f32>(scratch[rotated + 4u * g + t]) * w;
                }
            }
            scratch[table + e] = bitcast<u32>(scale * v);
        }
        if (pca) {
            var part1 = 0.0;
            var part2 = 0.0;
            for (var e = tid; e < p.padded_dim; e = e + WG) {
                let r = bitcast<f32>(scratch[rotated + e]);
                part1 = part1 + r * floats[p.off_pca + p.padded_dim + e];
                part2 = part2 + r * floats[p.off_pca + 2u * p.padded_dim + e];
            }
            constant = p.pca_scale * sum_over_workgroup(part1, tid);
            constant2 = p.pca_scale * sum_over_workgroup(part2, tid);
        } else {
            var part = 0.0;
            for (var e = tid; e < p.padded_dim; e = e + WG) {
                part = part + bitcast<f32>(scratch[rotated + e]);
            }
            constant = -sum_over_workgroup(part, tid) / sqrt(f32(p.dim));
        }
    }
    if (WEIGHTED) {
        var part = 0.0;
        for (var d = tid; d < p.dim; d = d + WG) {
            let q = query_value(d);
            weight[d] = q * floats[p.off_step1 + d];
            part = part + q * floats[p.off_lo1 + d];
        }
        // The sum's first barrier makes every invocation's weights seen by all.
        constant = sum_over_workgroup(part, tid);
    }
    storageBarrier();
    // Prefix sums of the probed list sizes, by runs of lists (a narrow filter probes
    // thousands): each invocation sums its run in place, invocation 0 adds the runs' totals in
    // order (into each run's last entry), and each invocation adds the total before its run
    // (the entry before it) to the rest of its run.
    let run = (np + WG - 1u) / WG;
    let run_lo = min(tid * run, np);
    let run_hi = min(run_lo + run, np);
    var within = 0u;
    for (var i = run_lo; i < run_hi; i = i + 1u) {
        within = within + scratch[prefix + i + 1u];
        scratch[prefix + i + 1u] = within;
    }
    storageBarrier();
    if (tid == 0u) {
        scratch[prefix] = 0u;
        var before = 0u;
        for (var l = 0u; l < WG; l = l + 1u) {
            let last = min(l * run + run, np);
            if (last > min(l * run, np)) {
                let sum = scratch[prefix + last];
                scratch[prefix + last] = sum + before;
                before = before + sum;
            }
        }
    }
    storageBarrier();
    if (run_lo > 0u && run_hi > run_lo) {
        let before = scratch[prefix + run_lo];
        for (var i = run_lo; i + 1u < run_hi; i = i + 1u) {
            scratch[prefix + i + 1u] = scratch[prefix + i + 1u] + before;
        }
    }
    storageBarrier();
    if (tid == 0u) {
        // Adaptive probing: the first list past the margin whose predecessors hold k vectors
        // (a filtered search's: k allowed vectors) ends the scan (lists ranked on the host
        // come cut to what it scans).
        var scanned = np;
        if (p.adaptive != 0u && !host_probes) {
            let limit = bitcast<f32>(scratch[probe_dist]) + p.probe_margin;
            for (var j = 1u; j < np; j = j + 1u) {
                if (bitcast<f32>(scratch[probe_dist + j]) > limit && scratch[prefix + j] >= p.k) {
                    scanned = j;
                    break;
                }
            }
        }
        total_plain = scratch[prefix + scanned];
    }
    storageBarrier();
    reset_pool(tid);
    let total = workgroupUniformLoad(&total_plain);

    // 2. Scan the probed lists as one flat range; each invocation walks its probe cursor on.
    // The automatic pool's step 4 skips the lists whose every estimate outside the pool is
    // too large: each probed list's smallest such estimate, kept as items are turned away or
    // dropped from the pool (the pool's own entries are rescored in step 3).
    let outside = p.error_margin > 0.0;
    // The scan's pool compacts at the slots it needs (a power of two, at least the pool plus a
    // round), not at `p.cap`, which also holds a narrow filter's thousands of ranked lists:
    // each compaction sorts only what it must.
    let scan_cap = min(p.cap, 1u << (32u - countLeadingZeros(p.pool_size + WG - 1u)));
    var pr = 0u;
    for (var b = 0u; b < total; b = b + WG) {
        let t = b + tid;
        let valid = t < total;
        var dist = 0.0;
        var position = 0u;
        if (valid) {
            position = locate(t, &pr, np);
            dist = first_stage(position, pr, constant, constant2);
        }
        offer(valid, dist, position, pr, p.pool_size, scan_cap, tid, outside);
    }
    compact(p.pool_size, tid, outside);

    // 3. Rescore the pool with the second stage, then the top k.
    let found = workgroupUniformLoad(&count_plain);
    if (p.kind2 != KIND_NONE) {
        // The automatic pool (vlc's SearchParams::pool_size): only a full pool leaves
        // candidates out, those whose first-stage keys are above its largest.
        let extend = p.error_margin > 0.0 && found == p.pool_size;
        var boundary_hi = 0u;
        var boundary_lo = 0u;
        if (found > 0u) {
            boundary_hi = get_hi(found - 1u);
            boundary_lo = get_lo(found - 1u);
        }
        pool_barrier();  // every invocation has read it before the keys are rescored
        // Groups of invocations (`group_for`) rescore the pool, one entry a group each round;
        // a group past the end repeats the last entry, so that every invocation takes part in
        // every round's sums. The first of each group keeps the first stage's error.
        let group = group_for(found);
        let per_round = WG / group;
        var sum = 0.0;
        var sum_sq = 0.0;
        for (var base = 0u; base < found; base = base + per_round) {
            let item = base + tid / group;
            let i = min(item, found - 1u);
            let before = unordered(get_hi(i));
            let dist = second_stage(get_lo(i), get_aux(i), constant, constant2, tid, group);
            if (item < found && tid % group == 0u) {
                let error = dist - before;
                sum = sum + error;
                sum_sq = sum_sq + error * error;
                set_hi(i, ordered(dist));
            }
        }
        pool_barrier();
        compact(p.k, tid, false);
        if (extend) {
            // The first stage's error over the pool (its standard deviation), and whether the
            // pool's worst estimate is under the k-th best plus its margin.
            let mean = sum_over_workgroup(sum, tid) / f32(found);
            let mean_sq = sum_over_workgroup(sum_sq, tid) / f32(found);
            if (tid == 0u) {
                let m = p.error_margin * sqrt(max(mean_sq - mean * mean, 0.0));
                margin_plain = select(-1.0, m, unordered(boundary_hi) < unordered(threshold) + m);
            }
            // 4. Rescore every scanned candidate beyond the pool whose first-stage estimate
            // (scored again, the same as in step 2) is under the k-th best plus the margin,
            // in the lists whose smallest estimate outside the pool is: the probe prefix sums
            // are rewritten to count only those lists' vectors (one flat range of them, as in
            // step 2).
            let margin = workgroupUniformLoad(&margin_plain);
            if (margin >= 0.0) {
                if (tid == 0u) {
                    let bound = unordered(threshold) + margin;
                    var run = 0u;
                    var end = 0u;
                    for (var i = 0u; i < np; i = i + 1u) {
                        let next = scratch[prefix + i + 1u];
                        if (next > total) {
                            break;  // past the lists scanned
                        }
                        let live = i >= LIST_MIN_SLOTS
                            || unordered(atomicLoad(&list_min[i])) < bound;
                        run = run + select(0u, next - end, live);
                        end = next;
                        scratch[prefix + i + 1u] = run;
                    }
                    total_plain = run;
                }
                storageBarrier();
                let live_total = workgroupUniformLoad(&total_plain);
                if (tid == 0u) {
                    atomicStore(&staged_count, 0u);
                }
                workgroupBarrier();  // from here `list_min` stages candidates
                var pr = 0u;
                for (var b = 0u; b < live_total; b = b + WG) {
                    // Each invocation scores one item's first stage and stages it if it passes
                    // (against the k-th best as of the last rescoring); once more than a round's
                    // worth is staged, or at the end, they are rescored.
                    let t = b + tid;
                    if (t < live_total) {
                        let position = locate(t, &pr, np);
                        let estimate = first_stage(position, pr, constant, constant2);
                        if (after(ordered(estimate), position, boundary_hi, boundary_lo)
                            && estimate < unordered(threshold) + margin) {
                            let slot = atomicAdd(&staged_count, 1u);
                            atomicStore(&list_min[slot], position);
                            atomicStore(&list_min[STAGED_SLOTS + slot], pr);
                        }
                    }
                    workgroupBarrier();
                    if (tid == 0u) {
                        staged_plain = atomicLoad(&staged_count);
                    }
                    let n = workgroupUniformLoad(&staged_plain);
                    if (n > WG || (n > 0u && b + WG >= live_total)) {
                        rescore_staged(n, constant, constant2, tid);
                    }
                }
                compact(p.k, tid, false);
            }
        }
    }
    for (var i = tid; i < p.k; i = i + WG) {
        let o = query * p.k + i;
        if (i < found) {
            out[o] = lists[p.off_ids + get_lo(i)];
            out[p.rows * p.k + o] = bitcast<u32>(max(unordered(get_hi(i)), 0.0));
        } else {
            out[o] = 0xffffffffu;
            out[p.rows * p.k + o] = 0u;
        }
    }
}
