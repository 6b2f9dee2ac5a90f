// @platformatic/kafka against kaas (flexible versions, batched FindCoordinator, OffsetFetch
// v8+): admin create, acks=all produce, a group consumer, an explicit commit read back.
// This machine has Node.js 20; the library uses Promise.withResolvers from Node.js 22.
Promise.withResolvers ??= function () {
  let resolve, reject
  const promise = new Promise((res, rej) => { resolve = res; reject = rej })
  return { promise, resolve, reject }
}
const { Admin, Consumer, Producer, stringSerializers, stringDeserializers } = await import('@platformatic/kafka')

// One host:port, or several separated by commas.
const brokers = process.argv[2].split(',')
const topic = 'platformatic'
const groupId = 'platformatic-group'
const count = 300

const admin = new Admin({ clientId: 'kaas-admin', bootstrapBrokers: brokers })
await admin.createTopics({ topics: [topic], partitions: 3, replicas: 1 })

const producer = new Producer({ clientId: 'kaas-producer', bootstrapBrokers: brokers, serializers: stringSerializers, acks: -1 })
for (let b = 0; b < count / 30; b++) {
  const messages = Array.from({ length: 30 }, (_, i) => ({ topic, key: `k${b * 30 + i}`, value: `m${b * 30 + i}` }))
  await producer.send({ messages })
}
await producer.close()

const consumer = new Consumer({ groupId, clientId: 'kaas-consumer', bootstrapBrokers: brokers, deserializers: stringDeserializers })
const stream = await consumer.consume({ autocommit: false, topics: [topic], mode: 'earliest', sessionTimeout: 10000, heartbeatInterval: 500 })
const seen = new Map()
const deadline = setTimeout(() => { console.error(`timed out after ${seen.size} records`); process.exit(1) }, 60000)
for await (const message of stream) {
  seen.set(`${message.partition}:${message.offset}`, message)
  if (seen.size >= count) break
}
clearTimeout(deadline)
const last = new Map()
for (const m of seen.values()) {
  const prev = last.get(m.partition)
  if (prev === undefined || m.offset > prev.offset) last.set(m.partition, m)
}
await consumer.commit({ offsets: [...last.values()].map(m => ({ topic, partition: m.partition, offset: m.offset + 1n, leaderEpoch: 0 })) })
const committed = await consumer.listCommittedOffsets({ topics: [{ topic, partitions: [0, 1, 2] }] })
let sum = 0n
for (const offsets of committed.values()) for (const o of offsets) sum += o
await stream.close()
await consumer.close()
const groups = await admin.listConsumerGroupOffsets({ groups: [groupId] })
await admin.close()
if (sum !== BigInt(count)) throw new Error(`committed ${sum}, expected ${count}: ${JSON.stringify(groups)}`)
console.log(`@platformatic/kafka: ${count} produced, ${seen.size} consumed, ${sum} committed`)
