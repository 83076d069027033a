/**
 * Request/response over `$cbs` and `$management`: the reply link, and the operations the
 * client uses (peek, renew lock, receive deferred, update disposition, schedule and cancel,
 * session state and session lock renewal).
 */

import { DeliveryEngine } from './delivery.js';
import {
  type AmqpMessage,
  formatGuid,
  guidBytes,
  type MessageEntity,
  type StoredMessage,
} from './MessageEntity.js';
import {
  amqp,
  CONDITIONS,
  ManagementError,
  plain,
  scheduledTimeOf,
  stripAddress,
  types,
  wireMessage,
} from './model.js';
import { encodeRule, ruleFromAmqp } from './rules.js';

const RULE_OPERATIONS = new Set([
  'com.microsoft:add-rule',
  'com.microsoft:remove-rule',
  'com.microsoft:enumerate-rules',
]);

/** The Premium tier's per-request limit of batch delete (Standard's is 500, the SDK's purge batch). */
const MAX_BATCH_DELETE = 4000;

/** What an operation answers: a status, a body, and for an empty 204 the condition that explains it. */
interface ManagementResult {
  status: number;
  body?: unknown;
  condition?: string;
}

/** Answers `$cbs` and `$management` requests. */
export abstract class ManagementService extends DeliveryEngine {
  /** Sends a reply on the link the requester receives replies on (its target is `reply_to`). */
  protected reply(
    requestLink: any,
    address: string,
    request: AmqpMessage,
    properties: Record<string, unknown>,
    body?: unknown,
  ): void {
    const replyTo = request.reply_to;
    const replyLink = this.findReplyLink(requestLink.connection, address, replyTo);
    if (!replyLink) throw new Error(`no reply link for ${address} (reply_to ${String(replyTo)})`);
    const response: AmqpMessage = {
      correlation_id: request.message_id,
      to: replyTo,
      application_properties: properties,
    };
    if (body !== undefined) response.body = body;
    replyLink.send(response);
  }

  private findReplyLink(connection: any, address: string, replyTo: unknown): any {
    let fallback: any;
    const sessions: any[] = Object.values(connection.local_channel_map ?? {});
    for (const session of sessions) {
      const links: any[] = Object.values(session.links ?? {});
      for (const candidate of links) {
        const role = this.roles.get(candidate);
        if (role?.kind !== 'reply' || role.address.toLowerCase() !== address.toLowerCase()) continue;
        if (candidate.remote.attach?.target?.address === replyTo) return candidate;
        fallback ??= candidate;
      }
    }
    return fallback;
  }

  protected onManagementRequest(link: any, address: string, request: AmqpMessage): void {
    const operation = String(request.application_properties?.operation ?? '');
    const entityPath = address.replace(/\/\$management$/i, '');
    let result: ManagementResult;
    try {
      result = this.manage(entityPath, operation, (plain(request.body) ?? {}) as Record<string, any>);
      if (result.status === 204 && result.condition) {
        // An empty result the client tells apart by its condition (batch delete: nothing left).
        this.reply(link, address, request, {
          statusCode: 204,
          statusDescription: statusText(204),
          errorCondition: result.condition,
        });
        return;
      }
    } catch (error) {
      const e =
        error instanceof ManagementError
          ? error
          : new ManagementError(500, 'amqp:internal-error', (error as Error).message);
      this.reply(link, address, request, {
        statusCode: e.statusCode,
        statusDescription: e.message,
        'error-condition': e.condition,
      });
      return;
    }
    this.reply(
      link,
      address,
      request,
      { statusCode: result.status, statusDescription: statusText(result.status) },
      result.body,
    );
  }

  private manage(entityPath: string, operation: string, body: Record<string, any>): ManagementResult {
    if (operation === 'com.microsoft:schedule-message') return this.scheduleMessages(entityPath, body);
    if (operation === 'com.microsoft:cancel-scheduled-message') return this.cancelScheduled(entityPath, body);
    if (RULE_OPERATIONS.has(operation)) return this.manageRules(entityPath, operation, body);
    const entity = this.resolveEntity(entityPath);
    if (!entity)
      throw new ManagementError(
        404,
        CONDITIONS.entityNotFound,
        `The messaging entity '${entityPath}' could not be found.`,
      );
    switch (operation) {
      case 'com.microsoft:renew-lock': {
        const expirations = tokensOf(body['lock-tokens']).map((token) => {
          const until = entity.renewLock(token);
          if (until === undefined) throw lockLost();
          return new Date(until);
        });
        return { status: 200, body: { expirations } };
      }
      case 'com.microsoft:peek-message':
        return this.peek(entity, body);
      case 'com.microsoft:batch-delete-messages':
        return this.batchDelete(entity, body);
      case 'com.microsoft:receive-by-sequence-number':
        return this.receiveDeferred(entity, body);
      case 'com.microsoft:update-disposition':
        return this.updateDisposition(entity, body);
      case 'com.microsoft:renew-session-lock': {
        const record = entity.sessions.get(String(body['session-id']));
        if (!record?.holder) throw sessionLockLost(String(body['session-id']));
        return { status: 200, body: { expiration: new Date(entity.renewSession(record)) } };
      }
      case 'com.microsoft:get-session-state': {
        const record = entity.sessions.get(String(body['session-id']));
        return { status: 200, body: { 'session-state': record?.state ?? null } };
      }
      case 'com.microsoft:set-session-state': {
        const record = entity.session(String(body['session-id']));
        const state = body['session-state'];
        record.state = state === null || state === undefined ? undefined : Buffer.from(state);
        return { status: 200, body: {} };
      }
      case 'com.microsoft:get-message-sessions': {
        const ids = new Set<string>();
        for (const stored of entity.messages.values())
          if (stored.sessionId !== undefined) ids.add(stored.sessionId);
        for (const record of entity.sessions.values()) if (record.state !== undefined) ids.add(record.id);
        const skip = Number(body.skip ?? 0);
        const top = Number(body.top ?? 100);
        const list = [...ids].slice(skip, skip + top);
        if (list.length === 0) return { status: 204, body: {} };
        return { status: 200, body: { 'sessions-ids': list, skip: skip + list.length } };
      }
      default:
        throw new ManagementError(
          501,
          CONDITIONS.notImplemented,
          `The operation '${operation}' is not emulated.`,
        );
    }
  }

  /**
   * `com.microsoft:batch-delete-messages` as SDK 7.10 sends it (`deleteMessages`,
   * `purgeMessages`): `message-count` (int), `enqueued-time-utc` (timestamp; the client
   * always sends one, now by default) and, from a session receiver, `session-id`. The
   * answer is 200 with `message-count`, or 204 with `com.microsoft:message-not-found` when
   * nothing was deleted, which the client reads as 0.
   */
  private batchDelete(entity: MessageEntity, body: Record<string, any>): ManagementResult {
    const count = toNumber(body['message-count']);
    if (!Number.isInteger(count) || count < 1 || count > MAX_BATCH_DELETE) {
      throw new ManagementError(
        400,
        CONDITIONS.argumentError,
        `message-count must be an integer from 1 to ${MAX_BATCH_DELETE} (got ${String(body['message-count'])}).`,
      );
    }
    const cutoff = body['enqueued-time-utc'];
    const before = cutoff === undefined || cutoff === null ? Date.now() : new Date(cutoff).getTime();
    if (!Number.isFinite(before)) {
      throw new ManagementError(
        400,
        CONDITIONS.argumentError,
        `enqueued-time-utc '${String(cutoff)}' is not a time.`,
      );
    }
    const sessionId =
      body['session-id'] === undefined || body['session-id'] === null
        ? undefined
        : String(body['session-id']);
    const deleted = entity.deleteOldest(count, before, sessionId);
    if (deleted === 0) return { status: 204, condition: CONDITIONS.messageNotFound };
    return { status: 200, body: { 'message-count': types.wrap_int(deleted) } };
  }

  /**
   * The rule manager's operations (`client.createRuleManager(topic, subscription)`):
   * `add-rule` (400 on an expression that does not parse, 409 on a name in use),
   * `remove-rule` (404 on an unknown name) and `enumerate-rules` (`top`/`skip` paging,
   * 204 past the end).
   */
  private manageRules(entityPath: string, operation: string, body: Record<string, any>): ManagementResult {
    const subscription = this.resolveSubscription(entityPath);
    if (!subscription) {
      throw new ManagementError(
        404,
        CONDITIONS.entityNotFound,
        `The messaging entity '${entityPath}' could not be found (rules belong to subscriptions).`,
      );
    }
    const name = body['rule-name'] === undefined ? '' : String(body['rule-name']);
    const index = subscription.rules.findIndex((rule) => rule.name.toLowerCase() === name.toLowerCase());
    if (operation === 'com.microsoft:add-rule') {
      const rule = ruleFromAmqp(name, plain(body['rule-description']));
      if (index >= 0) {
        throw new ManagementError(409, CONDITIONS.entityAlreadyExists, `The rule '${name}' already exists.`);
      }
      subscription.rules.push(rule);
      return { status: 200, body: {} };
    }
    if (operation === 'com.microsoft:remove-rule') {
      if (index < 0) {
        // The service's wording, which the client maps to MessagingEntityNotFound.
        throw new ManagementError(
          404,
          CONDITIONS.entityNotFound,
          `The messaging entity '${entityPath}/Rules/${name}' could not be found.`,
        );
      }
      subscription.rules.splice(index, 1);
      return { status: 200, body: {} };
    }
    const skip = toNumber(body.skip ?? 0);
    const top = toNumber(body.top ?? 100);
    const page = subscription.rules.slice(skip, skip + top);
    if (page.length === 0) return { status: 204, body: {} };
    return { status: 200, body: { rules: page.map(encodeRule) } };
  }

  private peek(entity: MessageEntity, body: Record<string, any>): { status: number; body?: unknown } {
    const from = toNumber(body['from-sequence-number'] ?? 1);
    const count = toNumber(body['message-count'] ?? 1);
    const sessionId =
      body['session-id'] === undefined || body['session-id'] === null
        ? undefined
        : String(body['session-id']);
    const messages: Array<{ message: Buffer }> = [];
    for (const stored of entity.messages.values()) {
      if (messages.length >= count) break;
      if (stored.seq < from) continue;
      if (sessionId !== undefined && stored.sessionId !== sessionId) continue;
      messages.push({ message: amqp.encode(wireMessage(stored, stored.lock?.until)) });
    }
    if (messages.length === 0) return { status: 204, body: {} };
    return { status: 200, body: { messages } };
  }

  private receiveDeferred(
    entity: MessageEntity,
    body: Record<string, any>,
  ): { status: number; body?: unknown } {
    const seqs = listOf(body['sequence-numbers']).map(toNumber);
    const peekLock = toNumber(body['receiver-settle-mode'] ?? 1) === 1;
    const found: StoredMessage[] = [];
    for (const seq of seqs) {
      const stored = entity.messages.get(seq);
      if (stored?.state !== 'deferred' || stored.lock) {
        throw new ManagementError(
          404,
          CONDITIONS.messageNotFound,
          `Failed to lock one or more specified messages. Either the message is not deferred or has already been received (sequence number ${seq}).`,
        );
      }
      found.push(stored);
    }
    const messages = found.map((stored) => {
      if (!peekLock) {
        const message = amqp.encode(wireMessage(stored, undefined));
        entity.take(stored);
        return { message };
      }
      const until = Date.now() + entity.settings.lockDurationMs;
      const lock = entity.lock(stored, undefined, until, true);
      return {
        message: amqp.encode(wireMessage(stored, until)),
        'lock-token': types.wrap_uuid(guidBytes(lock.token)),
      };
    });
    return { status: 200, body: { messages } };
  }

  private updateDisposition(
    entity: MessageEntity,
    body: Record<string, any>,
  ): { status: number; body?: unknown } {
    const status = String(body['disposition-status']);
    const properties = plain(body['properties-to-modify']) as Record<string, unknown> | undefined;
    for (const token of tokensOf(body['lock-tokens'])) {
      const stored = entity.lockedBy(token);
      if (!stored) throw lockLost();
      switch (status) {
        case 'completed':
          entity.complete(stored);
          break;
        case 'abandoned':
          entity.abandon(stored, properties);
          break;
        case 'defered':
        case 'deferred':
          entity.defer(stored, properties);
          break;
        case 'suspended':
          entity.deadLetter(
            stored,
            {
              reason:
                body['deadletter-reason'] === undefined
                  ? 'DeadLetteredByReceiver'
                  : String(body['deadletter-reason']),
              description:
                body['deadletter-description'] === undefined
                  ? undefined
                  : String(body['deadletter-description']),
            },
            properties,
          );
          break;
        default:
          throw new ManagementError(400, CONDITIONS.argumentError, `Unknown disposition-status '${status}'.`);
      }
    }
    this.schedulePump(entity);
    return { status: 200, body: {} };
  }

  private scheduleMessages(
    entityPath: string,
    body: Record<string, any>,
  ): { status: number; body?: unknown } {
    const path = stripAddress(entityPath);
    const entries = listOf(body.messages);
    const sequenceNumbers = entries.map((entry: any) => {
      const message = amqp.decode(Buffer.from(entry.message)) as AmqpMessage;
      return types.wrap_long(this.accept(path, message, scheduledTimeOf(message) ?? Date.now()));
    });
    return {
      status: 200,
      body: {
        'sequence-numbers': types.wrap_array(
          sequenceNumbers.map((s: any) => s.value),
          0x81,
        ),
      },
    };
  }

  private cancelScheduled(entityPath: string, body: Record<string, any>): { status: number; body?: unknown } {
    const key = stripAddress(entityPath).toLowerCase();
    for (const seq of listOf(body['sequence-numbers']).map(toNumber)) {
      const queue = this.queues.get(key);
      if (queue) {
        queue.cancelScheduled(seq);
        continue;
      }
      const copies = this.topicSchedules.get(key)?.get(seq) ?? [];
      for (const copy of copies) copy.entity.cancelScheduled(copy.seq);
      this.topicSchedules.get(key)?.delete(seq);
    }
    return { status: 200, body: {} };
  }
}

function toNumber(value: unknown): number {
  if (typeof value === 'number') return value;
  if (typeof value === 'bigint') return Number(value);
  if (Buffer.isBuffer(value)) return value.length === 8 ? Number(value.readBigInt64BE()) : Number.NaN;
  if (value && typeof value === 'object' && 'value' in value)
    return toNumber((value as { value: unknown }).value);
  return Number(value);
}

function listOf(value: unknown): any[] {
  if (Array.isArray(value)) return value;
  if (value && typeof value === 'object' && 'value' in value)
    return listOf((value as { value: unknown }).value);
  return value === undefined || value === null ? [] : [value];
}

/** Lock tokens of a request (uuids arrive as 16-byte Buffers) as GUID strings. */
function tokensOf(value: unknown): string[] {
  return listOf(value).map((token) =>
    Buffer.isBuffer(token) ? formatGuid(token) : String(token).toLowerCase(),
  );
}

function lockLost(): ManagementError {
  return new ManagementError(
    410,
    CONDITIONS.messageLockLost,
    'The lock supplied is invalid. Either the lock expired, or the message has already been removed from the queue.',
  );
}

function sessionLockLost(sessionId: string): ManagementError {
  return new ManagementError(
    410,
    CONDITIONS.sessionLockLost,
    `The session lock of '${sessionId}' has expired or is not held.`,
  );
}

function statusText(status: number): string {
  return status === 204 ? 'No Content' : status === 202 ? 'Accepted' : 'OK';
}
