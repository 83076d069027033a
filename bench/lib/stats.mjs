// Small statistics helpers shared by the scenarios: medians of repeated rounds and
// latency percentiles. Benchmarks report medians because the machine is shared (2 cores,
// other work running): one slow round must not move the reported figure.

/** Median of a list of numbers (mean of the two middle values for even lengths). */
export function median(values) {
  if (values.length === 0) return Number.NaN;
  const sorted = [...values].sort((a, b) => a - b);
  const mid = sorted.length >> 1;
  return sorted.length % 2 ? sorted[mid] : (sorted[mid - 1] + sorted[mid]) / 2;
}

/**
 * First quartile, median and third quartile (linear interpolation): the spread of
 * per-round ratios, shown next to a median so a reader sees how much the machine moved.
 */
export function quartiles(values) {
  const sorted = [...values].sort((a, b) => a - b);
  const at = (q) => {
    const pos = (sorted.length - 1) * q;
    const low = Math.floor(pos);
    const high = Math.ceil(pos);
    return sorted[low] + (sorted[high] - sorted[low]) * (pos - low);
  };
  return sorted.length ? [at(0.25), at(0.5), at(0.75)] : [Number.NaN, Number.NaN, Number.NaN];
}

/** Nearest-rank percentile `p` (0..100) of an ascending array. */
export function percentile(sorted, p) {
  if (sorted.length === 0) return Number.NaN;
  const rank = Math.ceil((p / 100) * sorted.length);
  return sorted[Math.min(sorted.length - 1, Math.max(0, rank - 1))];
}

/**
 * Collects per-operation latencies (ms) in a growable Float64Array: recording must cost
 * next to nothing, or it would slow the loop it measures.
 */
export class LatencyRecorder {
  constructor(capacity = 1 << 16) {
    this.values = new Float64Array(capacity);
    this.length = 0;
  }

  record(ms) {
    if (this.length === this.values.length) {
      const bigger = new Float64Array(this.values.length * 2);
      bigger.set(this.values);
      this.values = bigger;
    }
    this.values[this.length++] = ms;
  }

  /** Adds every value of another recorder (rounds pooled into one distribution). */
  merge(other) {
    for (let i = 0; i < other.length; i++) this.record(other.values[i]);
  }

  summary() {
    const sorted = this.values.slice(0, this.length).sort();
    return { count: this.length, p50: percentile(sorted, 50), p99: percentile(sorted, 99) };
  }
}

/** `1234.5` → `'1,235'`. */
export function formatRate(perSecond) {
  return Number.isFinite(perSecond) ? Math.round(perSecond).toLocaleString('en-US') : '—';
}

/** Latency in ms with two decimals (sub-millisecond figures are the interesting ones here). */
export function formatMs(ms) {
  return Number.isFinite(ms) ? ms.toFixed(2) : '—';
}

/** A ratio as `1.23×`. */
export function formatRatio(ratio) {
  return Number.isFinite(ratio) ? `${ratio.toFixed(2)}×` : '—';
}
