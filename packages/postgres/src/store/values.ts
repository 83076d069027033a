// Values as the store reads them from rows and writes them as parameters.

export function toDate(value: unknown): Date {
  return value instanceof Date ? value : new Date(value as string);
}

export function toJson(result: unknown): string {
  try {
    return JSON.stringify(result ?? null) ?? 'null';
  } catch {
    return 'null';
  }
}
