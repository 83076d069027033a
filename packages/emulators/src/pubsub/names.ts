import { invalidArgument } from './apiError.js';

// Resource-name rules from the Pub/Sub documentation ("Resource names"): an ID starts
// with a letter, is 3–255 characters of letters, digits and `-_.~+%`, and must not start
// with `goog`.
const RESOURCE_ID = /^[A-Za-z][A-Za-z0-9\-_.~+%]{2,254}$/;
const PROJECT_ID = /^[^/]+$/;

export interface ResourceName {
  project: string;
  id: string;
}

function parse(kind: 'topics' | 'subscriptions', name: unknown): ResourceName {
  const label = kind === 'topics' ? 'topic' : 'subscription';
  if (typeof name !== 'string' || name === '') throw invalidArgument(`Missing ${label} name.`);
  const parts = name.split('/');
  if (parts.length !== 4 || parts[0] !== 'projects' || parts[2] !== kind || !PROJECT_ID.test(parts[1]!)) {
    throw invalidArgument(`Invalid [${kind}] name: (name=${name})`);
  }
  const id = parts[3]!;
  if (!RESOURCE_ID.test(id) || id.toLowerCase().startsWith('goog')) {
    throw invalidArgument(`Invalid [${kind}] name: (name=${name})`);
  }
  return { project: parts[1]!, id };
}

/** Validates `projects/{project}/topics/{topic}`; INVALID_ARGUMENT otherwise. */
export const parseTopicName = (name: unknown) => parse('topics', name);
/** Validates `projects/{project}/subscriptions/{subscription}`; INVALID_ARGUMENT otherwise. */
export const parseSubscriptionName = (name: unknown) => parse('subscriptions', name);

/** Validates `projects/{project}`. */
export function parseProjectName(name: unknown): string {
  if (typeof name !== 'string') throw invalidArgument('Missing project name.');
  const parts = name.split('/');
  if (parts.length !== 2 || parts[0] !== 'projects' || !PROJECT_ID.test(parts[1]!)) {
    throw invalidArgument(`Invalid project name: (name=${name})`);
  }
  return parts[1]!;
}

/** A `google.protobuf.Duration` as the proto loader hands it over (int64 seconds as a string). */
export interface DurationValue {
  seconds?: string | number;
  nanos?: number;
}

export function durationToMs(duration: DurationValue | null | undefined): number | undefined {
  if (!duration) return undefined;
  return Number(duration.seconds ?? 0) * 1000 + Math.floor((duration.nanos ?? 0) / 1e6);
}

export function msToDuration(ms: number): { seconds: string; nanos: number } {
  return { seconds: String(Math.floor(ms / 1000)), nanos: (ms % 1000) * 1e6 };
}

export function msToTimestamp(ms: number): { seconds: string; nanos: number } {
  return msToDuration(ms);
}
