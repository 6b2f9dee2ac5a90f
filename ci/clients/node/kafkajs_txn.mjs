// kafkajs 2.2.4 transactions against kaas (no flexible versions; TxnOffsetCommit without group
// metadata): a consume-transform-produce copier with sendOffsets, an aborted transaction, and a
// read_committed consumer of the output.
import { Kafka, logLevel } from 'kafkajs'

// One host:port, or several separated by commas.
const brokers = process.argv[2].split(',')
const [src, dst, groupId, count] = ['kjs-txn-in', 'kjs-txn-out', 'kjs-txn-copier', 100]
const kafka = new Kafka({ clientId: 'kaas-kafkajs-txn', brokers, logLevel: logLevel.WARN })

const admin = kafka.admin()
await admin.connect()
await admin.createTopics({ topics: [{ topic: src, numPartitions: 2 }, { topic: dst, numPartitions: 2 }], waitForLeaders: true })
const plain = kafka.producer()
await plain.connect()
await plain.send({ topic: src, acks: -1, messages: Array.from({ length: count }, (_, i) => ({ partition: i % 2, value: `in${i}` })) })
await plain.disconnect()

const producer = kafka.producer({ transactionalId: 'kjs-copier', idempotent: true, maxInFlightRequests: 1 })
await producer.connect()
const consumer = kafka.consumer({ groupId, sessionTimeout: 10000, heartbeatInterval: 500 })
await consumer.connect()
await consumer.subscribe({ topic: src, fromBeginning: true })
let copied = 0
await consumer.run({
  autoCommit: false,
  eachBatch: async ({ batch }) => {
    if (batch.messages.length === 0) return
    const txn = await producer.transaction()
    try {
      await txn.send({ topic: dst, messages: batch.messages.map(m => ({ partition: batch.partition, value: `copy-${m.value}` })) })
      const next = (BigInt(batch.messages[batch.messages.length - 1].offset) + 1n).toString()
      await txn.sendOffsets({ consumerGroupId: groupId, topics: [{ topic: src, partitions: [{ partition: batch.partition, offset: next }] }] })
      await txn.commit()
      copied += batch.messages.length
    } catch (e) {
      await txn.abort()
      throw e
    }
  },
})
const deadline = Date.now() + 60000
while (copied < count) {
  if (Date.now() > deadline) throw new Error(`copied ${copied} of ${count}`)
  await new Promise(r => setTimeout(r, 100))
}
await consumer.disconnect()
const aborted = await producer.transaction()
await aborted.send({ topic: dst, messages: [{ partition: 0, value: 'aborted' }] })
await aborted.abort()
await producer.disconnect()

const offsets = await admin.fetchOffsets({ groupId, topics: [src] })
const committed = offsets[0].partitions.reduce((sum, p) => sum + Number(p.offset), 0)
if (committed !== count) throw new Error(`committed ${committed}, expected ${count}`)

const reader = kafka.consumer({ groupId: 'kjs-txn-reader', readUncommitted: false })
await reader.connect()
await reader.subscribe({ topic: dst, fromBeginning: true })
const values = []
await reader.run({ eachMessage: async ({ message }) => { values.push(message.value.toString()) } })
const until = Date.now() + 20000
while (values.length < count && Date.now() < until) await new Promise(r => setTimeout(r, 100))
await new Promise(r => setTimeout(r, 1000))
await reader.disconnect()
await admin.disconnect()
const expected = Array.from({ length: count }, (_, i) => `copy-in${i}`).sort()
if (JSON.stringify(values.sort()) !== JSON.stringify(expected)) throw new Error(`read ${values.length} values: ${values.slice(0, 5)}`)
console.log(`kafkajs transactions: ${count} copied exactly once, offsets committed in the transactions, abort invisible`)
