// Filled in by the entry-points work (issue 14).
export {};
