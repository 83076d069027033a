/**
 * The administration API over plain HTTP, as the official emulator serves it on port 5300:
 * the ATOM entity descriptions `ServiceBusAdministrationClient` reads and writes, for
 * queues, topics and subscriptions (create, get, update, delete, list, runtime properties
 * with message counts). With `UseDevelopmentEmulator=true` in the connection string the
 * client speaks http:// (SDK 7.10 and later; 7.9 always uses https://).
 *
 * Requests: `PUT|GET|DELETE /<queue|topic>`, `/<topic>/Subscriptions/<sub>`,
 * `/<topic>/Subscriptions/<sub>/Rules/<rule>`, and the lists `GET /$Resources/Queues|Topics`,
 * `/<topic>/Subscriptions`, `/<topic>/Subscriptions/<sub>/Rules` (with `$skip`/`$top`).
 * A GET of an entity that does not exist answers an empty feed (as the service does; the
 * client turns it into `MessageEntityNotFoundError`).
 */
import type { IncomingMessage, ServerResponse } from 'node:http';
import { checkEntityName, checkRuleName, checkSubscriptionName } from './adminNames.js';
import { adminRule, ruleEntry } from './adminRules.js';
import { ATOM, CONNECT, entry, escapeXml, leaves, STARTED } from './adminXml.js';
import { parseDuration, type QueueProperties, type TopicProperties } from './config.js';
import type { MessageEntity } from './MessageEntity.js';
import { CONDITIONS, ManagementError, type Subscription, type Topic } from './model.js';

/** What the HTTP layer needs from the emulator (its public surface). */
export interface AdminTarget {
  readonly namespace: string;
  createQueue(name: string, properties?: QueueProperties): void;
  createTopic(name: string, properties?: TopicProperties): void;
  createSubscription(topic: string, name: string, properties?: QueueProperties): void;
  deleteQueue(name: string): void;
  deleteTopic(name: string): void;
  deleteSubscription(topic: string, name: string): void;
  queueList(): string[];
  topicList(): Topic[];
  entityAt(path: string): MessageEntity | undefined;
}

const COUNTS = 'http://schemas.microsoft.com/netservices/2011/06/servicebus';
/** TimeSpan.MaxValue, what the service reports for "no limit". */
const FOREVER = 'P10675199DT2H48M5.4775807S';

/** Answers one administration request. */
export async function handleAdmin(
  target: AdminTarget,
  req: IncomingMessage,
  res: ServerResponse,
): Promise<void> {
  const url = new URL(req.url ?? '/', `http://${req.headers.host ?? 'localhost'}`);
  const base = `http://${req.headers.host ?? 'localhost'}`;
  const skip = count(url.searchParams.get('$skip'), 0);
  const top = count(url.searchParams.get('$top'), 100) || 100; // $top=0 would page forever
  try {
    const path = decodeURIComponent(url.pathname).replace(/^\/+|\/+$/g, '');
    const parts = path.split('/');
    if (req.method === 'GET' && /^\$resources\/(queues|topics)$/i.test(path)) {
      const queues = parts[1]!.toLowerCase() === 'queues';
      const entries = queues
        ? target.queueList().map((name) => queueEntry(target, base, name))
        : target.topicList().map((topic) => topicEntry(base, topic));
      return send(res, 200, page(base, path, entries, skip, top));
    }
    if (parts.length === 2 && parts[1]!.toLowerCase() === 'subscriptions' && req.method === 'GET') {
      const topic = findTopic(target, parts[0]!);
      const subs = topic ? [...topic.subscriptions.values()] : [];
      const entries = subs.map((sub) => subscriptionEntry(base, topic!, sub.name, sub.entity));
      return send(res, 200, page(base, path, entries, skip, top));
    }
    if (
      parts.length >= 4 &&
      parts[1]!.toLowerCase() === 'subscriptions' &&
      parts[3]!.toLowerCase() === 'rules'
    ) {
      return await rules(target, req, res, base, parts[0]!, parts[2]!, parts[4], skip, top);
    }
    if (parts.length === 1 && parts[0]) return await entity(target, req, res, base, parts[0]);
    if (parts.length === 3 && parts[1]!.toLowerCase() === 'subscriptions') {
      return await subscription(target, req, res, base, parts[0]!, parts[2]!);
    }
    return send(
      res,
      404,
      error(404, `No administration resource at '/${path}' (rules: use the rule manager).`),
    );
  } catch (e) {
    // Anything else (a malformed %-escape in the path, a body that is not a description) is the request's fault.
    const status = e instanceof ManagementError ? e.statusCode : 400;
    return send(res, status, error(status, (e as Error).message));
  }
}

/** `<topic>/Subscriptions/<sub>/Rules[/<rule>]`: list, get, create, update, delete. */
async function rules(
  target: AdminTarget,
  req: IncomingMessage,
  res: ServerResponse,
  base: string,
  topicName: string,
  subName: string,
  ruleName: string | undefined,
  skip: number,
  top: number,
): Promise<void> {
  // A PUT's body first: what exists is read after the last await, so a create or update
  // that raced this one (its body arrived first) is seen.
  const body = req.method === 'PUT' && ruleName ? await readBody(req) : '';
  const topic = findTopic(target, topicName);
  const sub: Subscription | undefined = topic?.subscriptions.get(subName.toLowerCase());
  const prefix = `${topicName}/Subscriptions/${subName}/Rules`;
  if (!ruleName) {
    if (req.method !== 'GET') return send(res, 405, error(405, `${req.method} is not supported.`));
    const entries = (sub?.rules ?? []).map((rule) => ruleEntry(base, `${prefix}/${rule.name}`, rule));
    return send(res, 200, page(base, prefix, entries, skip, top));
  }
  const path = `${prefix}/${ruleName}`;
  const index = sub ? sub.rules.findIndex((rule) => rule.name.toLowerCase() === ruleName.toLowerCase()) : -1;
  if (req.method === 'GET') {
    if (!sub || index < 0) return send(res, 200, feed(base, path, []));
    return send(res, 200, ruleEntry(base, path, sub.rules[index]!, true));
  }
  if (!sub)
    return send(
      res,
      404,
      error(404, `The messaging entity '${topicName}/Subscriptions/${subName}' could not be found.`),
    );
  if (req.method === 'DELETE') {
    if (index < 0) return send(res, 404, error(404, `The messaging entity '${path}' could not be found.`));
    sub.rules.splice(index, 1);
    return send(res, 200, '');
  }
  if (req.method !== 'PUT') return send(res, 405, error(405, `${req.method} is not supported.`));
  checkRuleName(ruleName);
  const rule = adminRule(ruleName, body);
  if (req.headers['if-match'] === '*') {
    if (index < 0) return send(res, 404, error(404, `The messaging entity '${path}' could not be found.`));
    sub.rules[index] = rule;
    return send(res, 200, ruleEntry(base, path, rule, true));
  }
  if (index >= 0) return send(res, 409, error(409, `The messaging entity '${path}' already exists.`));
  sub.rules.push(rule);
  return send(res, 201, ruleEntry(base, path, rule, true));
}

async function entity(
  target: AdminTarget,
  req: IncomingMessage,
  res: ServerResponse,
  base: string,
  name: string,
): Promise<void> {
  // A PUT's body first, so that the existence checks below see a create that raced this one.
  const body = req.method === 'PUT' ? await readBody(req) : '';
  const isQueue = target.queueList().some((q) => q.toLowerCase() === name.toLowerCase());
  const topic = findTopic(target, name);
  if (req.method === 'GET') {
    if (isQueue) return send(res, 200, queueEntry(target, base, name, true));
    if (topic) return send(res, 200, topicEntry(base, topic, true));
    return send(res, 200, feed(base, name, []));
  }
  if (req.method === 'DELETE') {
    if (!isQueue && !topic)
      return send(res, 404, error(404, `The messaging entity '${name}' could not be found.`));
    if (isQueue) target.deleteQueue(name);
    else target.deleteTopic(name);
    return send(res, 200, '');
  }
  if (req.method !== 'PUT') return send(res, 405, error(405, `${req.method} is not supported.`));
  checkEntityName(name);
  const isUpdate = req.headers['if-match'] === '*';
  const description = /<(QueueDescription|TopicDescription)\b/.exec(body)?.[1];
  if (!description) throw new Error('The request body is not a QueueDescription or TopicDescription entry.');
  const fields = leaves(body);
  refuseForwarding(fields);
  if (!isUpdate && (isQueue || topic)) {
    return send(res, 409, error(409, `The messaging entity '${name}' already exists.`));
  }
  if (isUpdate && !isQueue && !topic) {
    return send(res, 404, error(404, `The messaging entity '${name}' could not be found.`));
  }
  if (description === 'QueueDescription') {
    if (isUpdate) updateSettings(target.entityAt(name)!, fields);
    else target.createQueue(name, queueProperties(fields));
    return send(res, isUpdate ? 200 : 201, queueEntry(target, base, name, true));
  }
  if (isUpdate) throw new Error('Updating a topic is not emulated (delete and create it).');
  target.createTopic(name, {
    RequiresDuplicateDetection: flag(fields.RequiresDuplicateDetection),
    DuplicateDetectionHistoryTimeWindow: duration(fields.DuplicateDetectionHistoryTimeWindow),
    DefaultMessageTimeToLive: duration(fields.DefaultMessageTimeToLive),
  });
  return send(res, 201, topicEntry(base, findTopic(target, name)!, true));
}

async function subscription(
  target: AdminTarget,
  req: IncomingMessage,
  res: ServerResponse,
  base: string,
  topicName: string,
  name: string,
): Promise<void> {
  // A PUT's body first, so that the existence checks below see a create that raced this one.
  const body = req.method === 'PUT' ? await readBody(req) : '';
  const topic = findTopic(target, topicName);
  const sub = topic?.subscriptions.get(name.toLowerCase());
  const path = `${topicName}/Subscriptions/${name}`;
  if (req.method === 'GET') {
    if (!topic || !sub) return send(res, 200, feed(base, path, []));
    return send(res, 200, subscriptionEntry(base, topic, sub.name, sub.entity, true));
  }
  if (req.method === 'DELETE') {
    if (!topic || !sub)
      return send(res, 404, error(404, `The messaging entity '${path}' could not be found.`));
    target.deleteSubscription(topicName, name);
    return send(res, 200, '');
  }
  if (req.method !== 'PUT') return send(res, 405, error(405, `${req.method} is not supported.`));
  checkSubscriptionName(name);
  if (!topic) return send(res, 404, error(404, `The messaging entity '${topicName}' could not be found.`));
  const fields = leaves(body);
  refuseForwarding(fields);
  if (req.headers['if-match'] === '*') {
    if (!sub) return send(res, 404, error(404, `The messaging entity '${path}' could not be found.`));
    updateSettings(sub.entity, fields);
    return send(res, 200, subscriptionEntry(base, topic, sub.name, sub.entity, true));
  }
  if (sub) return send(res, 409, error(409, `The messaging entity '${path}' already exists.`));
  // createSubscription's defaultRuleOptions: the rule the subscription starts with instead
  // of $Default. Built first, so a filter that does not parse is a 400 and creates nothing.
  const defaultRule =
    /<(?:\w+:)?DefaultRuleDescription\b[^>]*>([\s\S]*?)<\/(?:\w+:)?DefaultRuleDescription>/.exec(body);
  const initialRuleName = defaultRule ? (leaves(defaultRule[1]!).Name ?? '$Default') : undefined;
  if (initialRuleName !== undefined) checkRuleName(initialRuleName);
  const initialRule = defaultRule ? adminRule(initialRuleName!, defaultRule[1]!) : undefined;
  target.createSubscription(topic.name, name, queueProperties(fields));
  const created = topic.subscriptions.get(name.toLowerCase())!;
  if (initialRule) created.rules.splice(0, created.rules.length, initialRule);
  return send(res, 201, subscriptionEntry(base, topic, created.name, created.entity, true));
}

/**
 * Auto-forwarding is not emulated: accepted, `forwardTo` would leave the messages where
 * they are while the application waits for them at the target. A clear 400 instead.
 */
function refuseForwarding(fields: Record<string, string>): void {
  for (const setting of ['ForwardTo', 'ForwardDeadLetteredMessagesTo']) {
    if (fields[setting]) {
      throw new ManagementError(
        400,
        CONDITIONS.argumentError,
        `${setting} '${fields[setting]}': auto-forwarding is not emulated.`,
      );
    }
  }
}

function findTopic(target: AdminTarget, name: string): Topic | undefined {
  return target.topicList().find((topic) => topic.name.toLowerCase() === name.toLowerCase());
}

function flag(value: string | undefined): boolean | undefined {
  return value === undefined ? undefined : value === 'true';
}

/** An ISO 8601 duration, or undefined for none or "forever" (the client's default of TimeSpan.MaxValue). */
function duration(value: string | undefined): string | undefined {
  if (!value || value.startsWith('P10675199D')) return undefined;
  return value;
}

function queueProperties(fields: Record<string, string>): QueueProperties {
  const properties: QueueProperties = {
    LockDuration: duration(fields.LockDuration),
    MaxDeliveryCount: fields.MaxDeliveryCount === undefined ? undefined : Number(fields.MaxDeliveryCount),
    RequiresSession: flag(fields.RequiresSession),
    RequiresDuplicateDetection: flag(fields.RequiresDuplicateDetection),
    DuplicateDetectionHistoryTimeWindow: duration(fields.DuplicateDetectionHistoryTimeWindow),
    DefaultMessageTimeToLive: duration(fields.DefaultMessageTimeToLive),
    DeadLetteringOnMessageExpiration: flag(fields.DeadLetteringOnMessageExpiration),
  };
  for (const key of Object.keys(properties) as Array<keyof QueueProperties>) {
    if (properties[key] === undefined) delete properties[key];
  }
  return properties;
}

/** An update (`If-Match: *`): the settings a running entity can change. */
function updateSettings(entity: MessageEntity, fields: Record<string, string>): void {
  const settings = entity.settings;
  if (duration(fields.LockDuration))
    settings.lockDurationMs = parseDuration(fields.LockDuration!, 'LockDuration');
  if (fields.MaxDeliveryCount !== undefined) settings.maxDeliveryCount = Number(fields.MaxDeliveryCount);
  if (fields.DeadLetteringOnMessageExpiration !== undefined) {
    settings.deadLetteringOnMessageExpiration = fields.DeadLetteringOnMessageExpiration === 'true';
  }
}

function iso(ms: number): string {
  if (!Number.isFinite(ms)) return FOREVER;
  const seconds = ms / 1000;
  const days = Math.floor(seconds / 86_400);
  const h = Math.floor((seconds % 86_400) / 3600);
  const m = Math.floor((seconds % 3600) / 60);
  const s = Math.round((seconds % 60) * 1000) / 1000;
  const time = `${h ? `${h}H` : ''}${m ? `${m}M` : ''}${s || (!h && !m) ? `${s}S` : ''}`;
  return `P${days ? `${days}D` : ''}T${time}`;
}

function countDetails(entity: MessageEntity | undefined): string {
  const counts = entity?.counts();
  const active = (counts?.active ?? 0) + (counts?.locked ?? 0) + (counts?.deferred ?? 0);
  return (
    `<CountDetails xmlns:d2p1="${COUNTS}">` +
    `<d2p1:ActiveMessageCount>${active}</d2p1:ActiveMessageCount>` +
    `<d2p1:DeadLetterMessageCount>${entity?.deadLetterQueue?.messages.size ?? 0}</d2p1:DeadLetterMessageCount>` +
    `<d2p1:ScheduledMessageCount>${counts?.scheduled ?? 0}</d2p1:ScheduledMessageCount>` +
    '<d2p1:TransferMessageCount>0</d2p1:TransferMessageCount>' +
    '<d2p1:TransferDeadLetterMessageCount>0</d2p1:TransferDeadLetterMessageCount></CountDetails>'
  );
}

function times(): string {
  return `<CreatedAt>${STARTED}</CreatedAt><UpdatedAt>${STARTED}</UpdatedAt><AccessedAt>${new Date().toISOString()}</AccessedAt>`;
}

function queueEntry(target: AdminTarget, base: string, name: string, root = false): string {
  const entity = target.entityAt(name)!;
  const s = entity.settings;
  const total = entity.messages.size + (entity.deadLetterQueue?.messages.size ?? 0);
  const description =
    `<QueueDescription xmlns="${CONNECT}" xmlns:i="http://www.w3.org/2001/XMLSchema-instance">` +
    `<LockDuration>${iso(s.lockDurationMs)}</LockDuration><MaxSizeInMegabytes>1024</MaxSizeInMegabytes>` +
    `<RequiresDuplicateDetection>${s.requiresDuplicateDetection}</RequiresDuplicateDetection>` +
    `<RequiresSession>${s.requiresSession}</RequiresSession>` +
    `<DefaultMessageTimeToLive>${iso(s.defaultTtlMs)}</DefaultMessageTimeToLive>` +
    `<DeadLetteringOnMessageExpiration>${s.deadLetteringOnMessageExpiration}</DeadLetteringOnMessageExpiration>` +
    `<DuplicateDetectionHistoryTimeWindow>${iso(s.duplicateDetectionWindowMs)}</DuplicateDetectionHistoryTimeWindow>` +
    `<MaxDeliveryCount>${s.maxDeliveryCount}</MaxDeliveryCount><EnableBatchedOperations>true</EnableBatchedOperations>` +
    `<SizeInBytes>0</SizeInBytes><MessageCount>${total}</MessageCount><Status>Active</Status>${times()}` +
    `${countDetails(entity)}<AutoDeleteOnIdle>${FOREVER}</AutoDeleteOnIdle><EnablePartitioning>false</EnablePartitioning>` +
    '<EntityAvailabilityStatus>Available</EntityAvailabilityStatus><EnableExpress>false</EnableExpress></QueueDescription>';
  return entry(base, entity.path, description, root);
}

function topicEntry(base: string, topic: Topic, root = false): string {
  const description =
    `<TopicDescription xmlns="${CONNECT}" xmlns:i="http://www.w3.org/2001/XMLSchema-instance">` +
    `<DefaultMessageTimeToLive>${iso(topic.ttlMs)}</DefaultMessageTimeToLive><MaxSizeInMegabytes>1024</MaxSizeInMegabytes>` +
    `<RequiresDuplicateDetection>${topic.requiresDuplicateDetection}</RequiresDuplicateDetection>` +
    `<DuplicateDetectionHistoryTimeWindow>${iso(topic.duplicateDetectionWindowMs)}</DuplicateDetectionHistoryTimeWindow>` +
    `<EnableBatchedOperations>true</EnableBatchedOperations><SizeInBytes>0</SizeInBytes><Status>Active</Status>${times()}` +
    `<SupportOrdering>true</SupportOrdering>${countDetails(undefined)}<SubscriptionCount>${topic.subscriptions.size}</SubscriptionCount>` +
    `<AutoDeleteOnIdle>${FOREVER}</AutoDeleteOnIdle><EnablePartitioning>false</EnablePartitioning>` +
    '<EntityAvailabilityStatus>Available</EntityAvailabilityStatus><EnableExpress>false</EnableExpress></TopicDescription>';
  return entry(base, topic.name, description, root);
}

function subscriptionEntry(
  base: string,
  topic: Topic,
  name: string,
  entity: MessageEntity,
  root = false,
): string {
  const s = entity.settings;
  const total = entity.messages.size + (entity.deadLetterQueue?.messages.size ?? 0);
  const description =
    `<SubscriptionDescription xmlns="${CONNECT}" xmlns:i="http://www.w3.org/2001/XMLSchema-instance">` +
    `<LockDuration>${iso(s.lockDurationMs)}</LockDuration><RequiresSession>${s.requiresSession}</RequiresSession>` +
    `<DefaultMessageTimeToLive>${iso(s.defaultTtlMs)}</DefaultMessageTimeToLive>` +
    `<DeadLetteringOnMessageExpiration>${s.deadLetteringOnMessageExpiration}</DeadLetteringOnMessageExpiration>` +
    '<DeadLetteringOnFilterEvaluationExceptions>true</DeadLetteringOnFilterEvaluationExceptions>' +
    `<MessageCount>${total}</MessageCount><MaxDeliveryCount>${s.maxDeliveryCount}</MaxDeliveryCount>` +
    `<EnableBatchedOperations>true</EnableBatchedOperations><Status>Active</Status>${times()}${countDetails(entity)}` +
    `<AutoDeleteOnIdle>${FOREVER}</AutoDeleteOnIdle>` +
    '<EntityAvailabilityStatus>Available</EntityAvailabilityStatus></SubscriptionDescription>';
  return entry(base, `${topic.name}/Subscriptions/${name}`, description, root);
}

function feed(base: string, path: string, entries: string[], links = ''): string {
  return (
    `<?xml version="1.0" encoding="utf-8"?><feed xmlns="${ATOM}"><title type="text">Publicly Listed Services</title>` +
    `<id>${escapeXml(`${base}/${path}`)}</id><updated>${new Date().toISOString()}</updated>${links}${entries.join('')}</feed>`
  );
}

/**
 * One page of a list, `$skip`/`$top` as the client sends them. When more follow, the feed
 * has `<link rel="next">` whose `$skip` the client takes as its continuation token: without
 * it `listQueues()` and the others stop after the first page (100 by default). A `self`
 * link is always there too, as on the service: the client's XML parser makes an array of
 * `link` only when there are two, and it looks for `next` in that array.
 */
function page(base: string, path: string, all: string[], skip: number, top: number): string {
  const href = (from: number) => escapeXml(`${base}/${path}?$skip=${from}&$top=${top}&api-version=2021-05`);
  let links = `<link rel="self" href="${href(skip)}"/>`;
  if (skip + top < all.length) links += `<link rel="next" href="${href(skip + top)}"/>`;
  return feed(base, path, all.slice(skip, skip + top), links);
}

/** A `$skip`/`$top` query value: a whole number, else `fallback`. */
function count(value: string | null, fallback: number): number {
  const n = Number(value ?? fallback);
  return Number.isInteger(n) && n >= 0 ? n : fallback;
}

function error(code: number, detail: string): string {
  return `<Error><Code>${code}</Code><Detail>${escapeXml(detail)}</Detail></Error>`;
}

function send(res: ServerResponse, status: number, body: string): void {
  res.writeHead(status, { 'content-type': 'application/atom+xml;type=entry;charset=utf-8' });
  res.end(body);
}

function readBody(req: IncomingMessage): Promise<string> {
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    req.on('data', (chunk: Buffer) => chunks.push(chunk));
    req.on('end', () => resolve(Buffer.concat(chunks).toString('utf8')));
    req.on('error', reject);
  });
}
