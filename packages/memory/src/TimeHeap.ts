/** An entry scheduled at `at` (epoch ms). */
export interface Timed {
  at: number;
}

/**
 * A binary min-heap ordered by `at`: the broker's timeline of lease expiries and delay
 * ends. Entries are never removed from the middle; the broker marks them stale with a
 * version number and drops them when they surface, which keeps every operation O(log n).
 *
 * @example
 * ```ts
 * const heap = new TimeHeap<{ at: number; id: string }>();
 * heap.push({ at: Date.now() + 100, id: 'a' });
 * heap.peek()?.id; // 'a'
 * ```
 */
export class TimeHeap<T extends Timed> {
  private readonly items: T[] = [];

  get size(): number {
    return this.items.length;
  }

  peek(): T | undefined {
    return this.items[0];
  }

  push(item: T): void {
    const items = this.items;
    items.push(item);
    let i = items.length - 1;
    while (i > 0) {
      const parent = (i - 1) >> 1;
      if (items[parent]!.at <= item.at) break;
      items[i] = items[parent]!;
      i = parent;
    }
    items[i] = item;
  }

  pop(): T | undefined {
    const items = this.items;
    const top = items[0];
    const last = items.pop();
    if (items.length === 0 || last === undefined) return top;
    let i = 0;
    for (;;) {
      const left = 2 * i + 1;
      if (left >= items.length) break;
      const right = left + 1;
      const child = right < items.length && items[right]!.at < items[left]!.at ? right : left;
      if (items[child]!.at >= last.at) break;
      items[i] = items[child]!;
      i = child;
    }
    items[i] = last;
    return top;
  }

  clear(): void {
    this.items.length = 0;
  }
}
