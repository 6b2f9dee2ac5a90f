// kafkajs 2.2.4 against kaas (no flexible versions, Metadata up to v6): admin create, gzip
// acks=all produce, a group consumer with auto-commit, committed offsets read back by admin.
import { Kafka, CompressionTypes, logLevel } from 'kafkajs'

// One host:port, or several separated by commas.
const brokers = process.argv[2].split(',')
const topic = 'kafkajs'
const groupId = 'kafkajs-group'
const count = 300
const kafka = new Kafka({ clientId: 'kaas-kafkajs', brokers, logLevel: logLevel.WARN })

const admin = kafka.admin()
await admin.connect()
await admin.createTopics({ topics: [{ topic, numPartitions: 3 }], waitForLeaders: true })

const producer = kafka.producer({ idempotent: true, maxInFlightRequests: 5 })
await producer.connect()
let acked = 0
for (let b = 0; b < count / 30; b++) {
  const messages = Array.from({ length: 30 }, (_, i) => ({ key: `k${b * 30 + i}`, value: `m${b * 30 + i}` }))
  const result = await producer.send({ topic, acks: -1, compression: CompressionTypes.GZIP, messages })
  for (const r of result) if (r.errorCode !== 0) throw new Error(`produce error ${r.errorCode}`)
  acked += messages.length
}
await producer.disconnect()

const consumer = kafka.consumer({ groupId, sessionTimeout: 10000, heartbeatInterval: 500 })
await consumer.connect()
await consumer.subscribe({ topic, fromBeginning: true })
const seen = new Set()
await consumer.run({ eachMessage: async ({ partition, message }) => { seen.add(`${partition}:${message.offset}`) } })
const deadline = Date.now() + 60000
while (seen.size < count) {
  if (Date.now() > deadline) throw new Error(`consumed ${seen.size} of ${count}`)
  await new Promise(r => setTimeout(r, 100))
}
await consumer.disconnect()

const offsets = await admin.fetchOffsets({ groupId, topics: [topic] })
const committed = offsets[0].partitions.reduce((sum, p) => sum + Number(p.offset), 0)
if (committed !== count) throw new Error(`committed ${committed}, expected ${count}`)
const high = await admin.fetchTopicOffsets(topic)
const total = high.reduce((sum, p) => sum + Number(p.high), 0)
if (total !== count) throw new Error(`high watermarks sum to ${total}`)
await admin.disconnect()
console.log(`kafkajs: ${acked} produced, ${seen.size} consumed, ${committed} committed`)
