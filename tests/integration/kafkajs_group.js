// A KafkaJS group consumer for test_group_clients.py:
//
//   node kafkajs_group.js <bootstrap> <topic> <group> <count>
//
// Subscribes from the beginning, commits each record's offset after printing it, and after
// <count> records prints {"ev": "done"} and stays in the group until stdin closes; then it
// disconnects (leaving the group) and prints {"ev": "closed"}. Stdout: one JSON object a
// line: {"ev": "rec", "p": partition, "o": offset}, {"ev": "assign", "parts": [...]}.
// NODE_PATH points at the node_modules kafka_clients.ensure_kafkajs installed.
'use strict'

const { Kafka, logLevel } = require('kafkajs')

const emit = obj => process.stdout.write(JSON.stringify(obj) + '\n')

async function main() {
  const [bootstrap, topic, group, countArg] = process.argv.slice(2)
  const count = Number(countArg)
  const kafka = new Kafka({
    clientId: 'runnel-it-group',
    brokers: bootstrap.split(','),
    logLevel: logLevel.NOTHING,
    retry: { retries: 10, initialRetryTime: 100 },
  })
  const consumer = kafka.consumer({
    groupId: group,
    sessionTimeout: 10000,
    heartbeatInterval: 500,
    rebalanceTimeout: 20000,
  })
  consumer.on(consumer.events.GROUP_JOIN, e => {
    const parts = (e.payload.memberAssignment && e.payload.memberAssignment[topic]) || []
    emit({ ev: 'assign', parts: [...parts].sort((a, b) => a - b) })
  })
  await consumer.connect()
  await consumer.subscribe({ topics: [topic], fromBeginning: true })
  let seen = 0
  let finish
  const done = new Promise(resolve => (finish = resolve))
  await consumer.run({
    autoCommit: false,
    eachMessage: async ({ partition, message }) => {
      emit({ ev: 'rec', p: partition, o: Number(message.offset) })
      await consumer.commitOffsets([
        { topic, partition, offset: (BigInt(message.offset) + 1n).toString() },
      ])
      seen += 1
      if (seen === count) finish()
    },
  })
  await done
  emit({ ev: 'done' })
  await new Promise(resolve => {
    process.stdin.on('end', resolve)
    process.stdin.on('close', resolve)
    process.stdin.resume()
  })
  await consumer.disconnect()
  emit({ ev: 'closed' })
}

main().catch(e => {
  process.stderr.write(`kafkajs_group: ${e.stack || e}\n`)
  process.exit(2)
})
