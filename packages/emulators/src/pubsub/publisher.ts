// The Publisher service: its gRPC handlers and Publish with the service's limits.

import type { UntypedServiceImplementation } from '@grpc/grpc-js';
import { failedPrecondition, invalidArgument } from './apiError.js';
import {
  DELETED_TOPIC,
  MAX_ATTRIBUTE_KEY_BYTES,
  MAX_ATTRIBUTE_VALUE_BYTES,
  MAX_ATTRIBUTES,
  MAX_MESSAGE_BYTES,
  MAX_MESSAGES_PER_PUBLISH,
  MAX_ORDERING_KEY_BYTES,
  MAX_PUBLISH_REQUEST_BYTES,
  messageSize,
  type PubsubMessageValue,
  paginate,
  unary,
} from './model.js';
import { parseProjectName } from './names.js';
import { SubscriberService } from './subscriber.js';

export abstract class PublisherService extends SubscriberService {
  protected publisherHandlers(): UntypedServiceImplementation {
    return {
      CreateTopic: unary((topic: Record<string, unknown>) => this.createTopic(topic)),
      GetTopic: unary((req: { topic?: string }) => this.topicResource(this.requireTopic(req.topic))),
      UpdateTopic: unary((req: { topic?: Record<string, unknown>; updateMask?: { paths?: string[] } }) =>
        this.updateTopic(req),
      ),
      ListTopics: unary((req: { project?: string; pageSize?: number; pageToken?: string }) => {
        const project = parseProjectName(req.project);
        const names = [...this.topics.keys()]
          .filter((name) => name.startsWith(`projects/${project}/`))
          .sort();
        const { page, nextPageToken } = paginate(names, req.pageSize, req.pageToken);
        return { topics: page.map((name) => this.topicResource(this.topics.get(name)!)), nextPageToken };
      }),
      ListTopicSubscriptions: unary((req: { topic?: string; pageSize?: number; pageToken?: string }) => {
        const topic = this.requireTopic(req.topic);
        const { page, nextPageToken } = paginate(
          [...topic.subscriptions].sort(),
          req.pageSize,
          req.pageToken,
        );
        return { subscriptions: page, nextPageToken };
      }),
      DeleteTopic: unary((req: { topic?: string }) => {
        const topic = this.requireTopic(req.topic);
        this.topics.delete(topic.name);
        // The service keeps the subscriptions; they point at `_deleted-topic_` and get no
        // new messages.
        for (const name of topic.subscriptions) {
          const subscription = this.subscriptions.get(name);
          if (subscription) subscription.config.topic = DELETED_TOPIC;
        }
        return {};
      }),
      DetachSubscription: unary((req: { subscription?: string }) => {
        const subscription = this.requireSubscription(req.subscription);
        subscription.config.detached = true;
        this.topics.get(subscription.config.topic)?.subscriptions.delete(subscription.name);
        for (const entry of subscription.messages.values()) this.forget(entry);
        subscription.messages.clear();
        subscription.keyBatches.clear();
        for (const stream of [...subscription.streams]) {
          this.endStream(stream, failedPrecondition('The subscription is detached.'));
        }
        return {};
      }),
      Publish: unary((req: { topic?: string; messages?: PubsubMessageValue[] }) => this.publish(req)),
    };
  }

  protected publish(req: { topic?: string; messages?: PubsubMessageValue[] }): { messageIds: string[] } {
    const topic = this.requireTopic(req.topic);
    const messages = req.messages ?? [];
    if (messages.length === 0) throw invalidArgument('The request contains no messages.');
    if (messages.length > MAX_MESSAGES_PER_PUBLISH) {
      throw invalidArgument(
        `The request contains ${messages.length} messages; at most ${MAX_MESSAGES_PER_PUBLISH} are allowed.`,
      );
    }
    let requestBytes = 0;
    for (const message of messages) {
      const data = message.data ?? Buffer.alloc(0);
      const attributes = message.attributes ?? {};
      if (data.length === 0 && Object.keys(attributes).length === 0) {
        throw invalidArgument('Some messages are empty: a message needs data or at least one attribute.');
      }
      if (Object.keys(attributes).length > MAX_ATTRIBUTES) {
        throw invalidArgument(
          `A message has ${Object.keys(attributes).length} attributes; at most ${MAX_ATTRIBUTES} are allowed.`,
        );
      }
      for (const [key, value] of Object.entries(attributes)) {
        if (key === '' || Buffer.byteLength(key) > MAX_ATTRIBUTE_KEY_BYTES) {
          throw invalidArgument(`Invalid attribute key: "${key}".`);
        }
        if (Buffer.byteLength(value) > MAX_ATTRIBUTE_VALUE_BYTES) {
          throw invalidArgument(`The value of attribute "${key}" is longer than 1024 bytes.`);
        }
      }
      if (Buffer.byteLength(message.orderingKey ?? '') > MAX_ORDERING_KEY_BYTES) {
        throw invalidArgument('An ordering key is longer than 1024 bytes.');
      }
      const size = messageSize(data, attributes, message.orderingKey ?? '');
      if (size > MAX_MESSAGE_BYTES) {
        throw invalidArgument(`A message is ${size} bytes; at most ${MAX_MESSAGE_BYTES} are allowed.`);
      }
      requestBytes += size;
    }
    if (requestBytes > MAX_PUBLISH_REQUEST_BYTES) {
      throw invalidArgument('The request is larger than the 10 MB limit.');
    }
    return { messageIds: messages.map((message) => this.append(topic, message)) };
  }
}
