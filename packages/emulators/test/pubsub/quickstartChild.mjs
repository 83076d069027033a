// The official quickstart (create a topic and a subscription, listen, publish), run in a
// child process with nothing but PUBSUB_EMULATOR_HOST and PUBSUB_PROJECT_ID set, the way
// a user runs the samples. Prints the received message's data and exits 0.
import { PubSub } from '@google-cloud/pubsub';

const [topicId, subscriptionId] = process.argv.slice(2);
const pubsub = new PubSub();
const [topic] = await pubsub.createTopic(topicId);
const [subscription] = await topic.createSubscription(subscriptionId);
const received = new Promise((resolve) => {
  subscription.on('message', (message) => {
    message.ack();
    resolve(message.data.toString());
  });
});
subscription.on('error', (error) => {
  console.error(error);
  process.exit(1);
});
await topic.publishMessage({ data: Buffer.from('Test message!') });
console.log(await received);
await subscription.close();
await pubsub.close();
