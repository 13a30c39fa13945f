// KafkaJS for the produce/consume integration tests, driven like rdkafka_client.cc:
//
//   node kafkajs_client.js produce <bootstrap> <topic> '{"compression": "gzip", "acks": -1}'
//       stdin: record lines (partition, timestamp, key, value, headers; see kafka_clients.py)
//       stdout: one delivery report a line: index error partition offset
//   node kafkajs_client.js consume <bootstrap> <topic> <partition>:<offset>:<count>[,...]
//                                  '{"timeoutMs": 60000}'
//       stdout: partition offset timestamp-type timestamp key value headers
//   node kafkajs_client.js txn <bootstrap> <topic> '{"transactionalId": "t", "transactions": 12,
//        "perTxn": 20, "partitions": 3, "abortEvery": 3, "group": "g"}'
//       Transaction t (0-based) sends perTxn records, value "<t>:<i>" to partition i % partitions,
//       and the offset t + 1 of partition 0 for the group (sendOffsets); it is aborted when
//       t % abortEvery == abortEvery - 1, else committed. Then one committed transaction of an
//       "end" record per partition. stdout: "commit <t>" or "abort <t>" a line, then
//       "offsets <group's committed offset of partition 0>" as the admin client fetches it.
//   node kafkajs_client.js group-consume <bootstrap> <topic> '{"group": "g", "partitions": 3,
//        "timeoutMs": 60000}'
//       A group consumer (KafkaJS's default isolation: read_committed) from the beginning
//       until it has read an "end" record in every partition. stdout: partition value a line.
//
// KafkaJS consumes only in consumer groups, and groups are not this test's subject: the
// consume mode reads through KafkaJS's own Fetch path instead (its cluster's broker object,
// the one its group consumer uses), which decodes record batches and decompresses them with
// the same codecs.
//
// Codecs: gzip is KafkaJS's own; snappy is kafkajs-snappy; lz4 (frame format) is lz4js and
// zstd is @bokuweb/zstd-wasm to compress and fzstd to decompress, all pure JavaScript or
// WebAssembly so that nothing is compiled at install time. NODE_PATH points at their
// node_modules (kafka_clients.ensure_kafkajs installs them from package-lock.json).
'use strict'

const readline = require('readline')
const { Kafka, CompressionTypes, CompressionCodecs, logLevel } = require('kafkajs')

async function registerCodecs() {
  CompressionCodecs[CompressionTypes.Snappy] = require('kafkajs-snappy')
  const lz4 = require('lz4js')
  CompressionCodecs[CompressionTypes.LZ4] = () => ({
    async compress(encoder) {
      return Buffer.from(lz4.compress(encoder.buffer))
    },
    async decompress(buffer) {
      return Buffer.from(lz4.decompress(buffer))
    },
  })
  const zstdWasm = require('@bokuweb/zstd-wasm')
  await zstdWasm.init()
  const fzstd = require('fzstd')
  CompressionCodecs[CompressionTypes.ZSTD] = () => ({
    async compress(encoder) {
      return Buffer.from(zstdWasm.compress(encoder.buffer, 3))
    },
    async decompress(buffer) {
      // fzstd handles frames whose content size is not in the header, as librdkafka writes
      const out = fzstd.decompress(new Uint8Array(buffer))
      return Buffer.from(out.buffer, out.byteOffset, out.byteLength)
    },
  })
}

const COMPRESSION = {
  none: CompressionTypes.None,
  gzip: CompressionTypes.GZIP,
  snappy: CompressionTypes.Snappy,
  lz4: CompressionTypes.LZ4,
  zstd: CompressionTypes.ZSTD,
}

const unhex = s => (s === '-' ? null : Buffer.from(s, 'hex'))
const hex = b => (b === null || b === undefined ? '-' : Buffer.from(b).toString('hex'))

function parseRecord(line) {
  const [partition, timestamp, key, value, headers] = line.split('\t')
  const message = { key: unhex(key), value: unhex(value) }
  if (timestamp !== '0') message.timestamp = timestamp
  if (headers) {
    // Repeated names become an array, which KafkaJS writes as one header each, in order.
    message.headers = {}
    for (const h of headers.split(',')) {
      const [k, v] = h.split('=')
      const name = Buffer.from(k, 'hex').toString()
      const val = unhex(v)
      const old = message.headers[name]
      message.headers[name] = old === undefined ? val : [].concat(old, [val])
    }
  }
  return { partition: Number(partition), message }
}

async function readStdin() {
  const lines = []
  const rl = readline.createInterface({ input: process.stdin, crlfDelay: Infinity })
  for await (const line of rl) if (line.length) lines.push(line)
  return lines
}

function client(bootstrap) {
  return new Kafka({
    clientId: 'runnel-it',
    brokers: bootstrap.split(','),
    logLevel: logLevel.NOTHING,
    retry: { retries: 8, initialRetryTime: 100 },
    requestTimeout: 30000,
  })
}

async function produce(bootstrap, topic, opts) {
  const records = (await readStdin()).map(parseRecord)
  const producer = client(bootstrap).producer({ allowAutoTopicCreation: false })
  await producer.connect()
  const out = []
  // Consecutive records with a partition go in one send() (batches of many records); a record
  // left to the partitioner goes alone, so its partition and offset are known.
  let i = 0
  while (i < records.length) {
    let j = i + 1
    if (records[i].partition >= 0) {
      while (j < records.length && records[j].partition >= 0 && j - i < 1000) j++
    }
    const batch = records.slice(i, j)
    const messages = batch.map(r =>
      r.partition >= 0 ? { ...r.message, partition: r.partition } : r.message
    )
    try {
      const result = await producer.send({
        topic,
        messages,
        acks: opts.acks,
        compression: COMPRESSION[opts.compression || 'none'],
        timeout: 30000,
      })
      const next = {}
      for (const r of result) next[r.partition] = BigInt(r.baseOffset)
      for (let k = 0; k < batch.length; k++) {
        const p = batch[k].partition >= 0 ? batch[k].partition : result[0].partition
        out.push(`${i + k}\tNO_ERROR\t${p}\t${next[p]}`)
        next[p] += 1n
      }
    } catch (e) {
      const name = e.type || e.name || 'ERROR'
      for (let k = 0; k < batch.length; k++) out.push(`${i + k}\t${name}\t-1\t-1`)
    }
    i = j
  }
  await producer.disconnect()
  process.stdout.write(out.map(l => l + '\n').join(''))
}

async function txn(bootstrap, topic, opts) {
  const kafka = client(bootstrap)
  const producer = kafka.producer({
    transactionalId: opts.transactionalId,
    idempotent: true,
    maxInFlightRequests: 1,
    allowAutoTopicCreation: false,
  })
  await producer.connect()
  const lines = []
  for (let t = 0; t < opts.transactions; t++) {
    const transaction = await producer.transaction()
    const messages = []
    for (let i = 0; i < opts.perTxn; i++) {
      messages.push({ partition: i % opts.partitions, value: `${t}:${i}` })
    }
    await transaction.send({ topic, messages, acks: -1 })
    await transaction.sendOffsets({
      consumerGroupId: opts.group,
      topics: [{ topic, partitions: [{ partition: 0, offset: String(t + 1) }] }],
    })
    if (t % opts.abortEvery === opts.abortEvery - 1) {
      await transaction.abort()
      lines.push(`abort ${t}`)
    } else {
      await transaction.commit()
      lines.push(`commit ${t}`)
    }
  }
  const end = await producer.transaction()
  const ends = []
  for (let p = 0; p < opts.partitions; p++) ends.push({ partition: p, value: 'end' })
  await end.send({ topic, messages: ends, acks: -1 })
  await end.commit()
  await producer.disconnect()
  const admin = kafka.admin()
  await admin.connect()
  const fetched = await admin.fetchOffsets({ groupId: opts.group, topics: [topic] })
  await admin.disconnect()
  const p0 = fetched[0].partitions.find(p => p.partition === 0)
  lines.push(`offsets ${p0 ? p0.offset : 'none'}`)
  process.stdout.write(lines.map(l => l + '\n').join(''))
}

async function groupConsume(bootstrap, topic, opts) {
  const consumer = client(bootstrap).consumer({
    groupId: opts.group,
    sessionTimeout: 10000,
    heartbeatInterval: 500,
    maxWaitTimeInMs: 200,
  })
  await consumer.connect()
  await consumer.subscribe({ topics: [topic], fromBeginning: true })
  const lines = []
  const ended = new Set()
  let finish
  const done = new Promise(resolve => (finish = resolve))
  await consumer.run({
    eachMessage: async ({ partition, message }) => {
      if (ended.has(partition)) return
      const value = message.value.toString()
      if (value === 'end') {
        ended.add(partition)
        if (ended.size === opts.partitions) finish()
        return
      }
      lines.push(`${partition}\t${value}`)
    },
  })
  const timer = setTimeout(finish, opts.timeoutMs || 60000)
  await done
  clearTimeout(timer)
  await consumer.disconnect()
  process.stdout.write(lines.map(l => l + '\n').join(''))
  if (ended.size !== opts.partitions) {
    process.stderr.write(`the end of ${opts.partitions - ended.size} partitions not reached\n`)
    process.exitCode = 1
  }
}

function headerField(headers) {
  const parts = []
  for (const [k, v] of Object.entries(headers || {})) {
    for (const one of Array.isArray(v) ? v : [v]) {
      parts.push(`${Buffer.from(k).toString('hex')}=${hex(one)}`)
    }
  }
  return parts.join(',')
}

async function consume(bootstrap, topic, wantsArg, opts) {
  const kafka = client(bootstrap)
  const createCluster = Object.getOwnPropertySymbols(kafka).find(
    s => s.description === 'private:Kafka:createCluster'
  )
  const cluster = kafka[createCluster]({ metadataMaxAge: 300000, allowAutoTopicCreation: false })
  await cluster.connect()
  await cluster.addTargetTopic(topic)
  const next = {}
  const left = {}
  for (const w of wantsArg.split(',')) {
    const [p, off, count] = w.split(':').map(Number)
    if (count > 0) {
      next[p] = BigInt(off)
      left[p] = count
    }
  }
  const deadline = Date.now() + (opts.timeoutMs || 60000)
  const lines = []
  while (Object.values(left).some(n => n > 0) && Date.now() < deadline) {
    const partitions = Object.keys(left).map(Number).filter(p => left[p] > 0)
    const byLeader = cluster.findLeaderForPartitions(topic, partitions)
    for (const [leader, ps] of Object.entries(byLeader)) {
      const broker = await cluster.findBroker({ nodeId: leader })
      const response = await broker.fetch({
        replicaId: -1,
        isolationLevel: 0,
        maxWaitTime: 200,
        minBytes: 1,
        maxBytes: 16 << 20,
        topics: [
          {
            topic,
            partitions: ps.map(p => ({
              partition: p,
              fetchOffset: next[p].toString(),
              maxBytes: 1 << 20,
            })),
          },
        ],
      })
      for (const t of response.responses) {
        for (const part of t.partitions) {
          const p = part.partition
          if (part.errorCode !== 0) {
            process.stderr.write(`fetch error ${part.errorCode} on partition ${p}\n`)
            continue
          }
          for (const m of part.messages) {
            const offset = BigInt(m.offset)
            // A batch can start before the offset asked for; control records are not data.
            if (offset < next[p] || m.isControlRecord || left[p] === 0) continue
            const tsType = m.batchContext && m.batchContext.timestampType === 1 ? 2 : 1
            const fields = [p, m.offset, tsType, m.timestamp, hex(m.key), hex(m.value)]
            lines.push([...fields, headerField(m.headers)].join('\t'))
            next[p] = offset + 1n
            left[p] -= 1
          }
        }
      }
    }
  }
  await cluster.disconnect()
  process.stdout.write(lines.map(l => l + '\n').join(''))
  const missing = Object.entries(left).filter(([, n]) => n > 0)
  if (missing.length) {
    process.stderr.write(`records missing: ${JSON.stringify(Object.fromEntries(missing))}\n`)
    process.exitCode = 1
  }
}

async function main() {
  const [mode, bootstrap, topic, ...rest] = process.argv.slice(2)
  await registerCodecs()
  if (mode === 'produce') {
    await produce(bootstrap, topic, JSON.parse(rest[0] || '{}'))
  } else if (mode === 'consume') {
    await consume(bootstrap, topic, rest[0], JSON.parse(rest[1] || '{}'))
  } else if (mode === 'txn') {
    await txn(bootstrap, topic, JSON.parse(rest[0]))
  } else if (mode === 'group-consume') {
    await groupConsume(bootstrap, topic, JSON.parse(rest[0]))
  } else {
    throw new Error(`unknown mode ${mode}`)
  }
}

main().catch(e => {
  process.stderr.write(`kafkajs_client: ${e.stack || e}\n`)
  process.exit(2)
})
