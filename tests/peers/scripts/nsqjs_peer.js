'use strict'
// nsqjs (pinned in ../nsqjs/package.json) as a real NSQ peer:
//   node nsqjs_peer.js SCENARIO 'JSON params'
// Prints one JSON line ({ok, ...observations}) and exits 0, or non-zero on failure.
// A hard timer (params.timeout seconds) always ends the process.

const path = require('path')
const nsq = require(path.resolve(__dirname, '..', 'nsqjs', 'node_modules', 'nsqjs'))

const [scenario, rawParams] = process.argv.slice(2)
const params = JSON.parse(rawParams || '{}')
const T0 = Date.now()
const state = {errors: []}
let finished = false

function now() {
  return (Date.now() - T0) / 1000
}

function emit(result, code) {
  if (finished) return
  finished = true
  process.stdout.write(JSON.stringify(result) + '\n', () => process.exit(code))
}

setTimeout(() => {
  emit({ok: false, error: 'scenario timed out', ...state}, 3)
}, (params.timeout || 20) * 1000)

function hostPort(address) {
  const i = address.lastIndexOf(':')
  return [address.slice(0, i), Number(address.slice(i + 1))]
}

function msgRecord(msg) {
  return {
    id: msg.id,
    attempts: msg.attempts,
    body: msg.body.toString('base64'),
    timestamp: msg.timestamp.toString(),
    t: now(),
    recv_ms: Date.now(),
  }
}

function connectWriter() {
  const [host, port] = hostPort(params.tcp)
  const options = {}
  for (const key of ['deflate', 'deflateLevel', 'snappy']) {
    if (params[key] !== undefined) options[key] = params[key]
  }
  const writer = new nsq.Writer(host, port, options)
  return new Promise((resolve, reject) => {
    writer.on('error', (err) => state.errors.push(String(err)))
    writer.on('ready', () => resolve(writer))
    writer.on('closed', () => reject(new Error('writer closed before ready')))
    writer.connect()
  })
}

function publishOne(writer, fn) {
  return new Promise((resolve) => {
    fn((err) => resolve(err ? 'ERROR ' + String(err) : 'OK'))
  })
}

async function scPublish() {
  const writer = await connectWriter()
  const bodies = params.bodies.map((b) => Buffer.from(b, 'base64'))
  const mode = params.mode || 'pub'
  const responses = []
  if (mode === 'mpub') {
    responses.push(await publishOne(writer, (cb) => writer.publish(params.topic, bodies, cb)))
  } else {
    for (const body of bodies) {
      if (mode === 'dpub') {
        // nsqjs 0.13.0's deferPublish hands a bare message to produceMessages, which then
        // throws "Expect an array"; a one-element array is what reaches DPUB.
        responses.push(
          await publishOne(writer, (cb) =>
            writer.deferPublish(params.topic, [body], params.defer_ms, cb)
          )
        )
      } else {
        responses.push(await publishOne(writer, (cb) => writer.publish(params.topic, body, cb)))
      }
    }
  }
  const identify = writer.conn.statemachine.identifyResponse
  writer.close()
  return {responses, published_at: now(), identify_response: identify}
}

async function scPublishError() {
  const writer = await connectWriter()
  const closed = new Promise((resolve) => writer.on('closed', () => resolve(true)))
  const response = await publishOne(writer, (cb) => writer.publish('bad!topic', 'x', cb))
  const wasClosed = await Promise.race([
    closed,
    new Promise((resolve) => setTimeout(() => resolve(false), 2000)),
  ])
  return {response, closed: wasClosed}
}

function scConsume() {
  const mode = params.mode || 'fin'
  const deliveries = []
  const discarded = []
  state.deliveries = deliveries
  const counters = {finished: 0, max_held: 0, touches: 0, batches: []}
  const held = []
  let flushTimer = null
  let reader = null

  return new Promise((resolve) => {
    function done() {
      setTimeout(() => {
        reader.close()
        resolve({deliveries, discarded, ...counters})
      }, (params.linger || 0.2) * 1000)
    }

    function finishedOne() {
      counters.finished += 1
      if (counters.finished === params.count) done()
    }

    function flush() {
      flushTimer = null
      counters.batches.push(held.length)
      for (const m of held.splice(0)) {
        m.finish()
        finishedOne()
      }
    }

    const options = {
      nsqdTCPAddresses: [params.tcp],
      maxInFlight: params.max_in_flight || 1,
      maxAttempts: params.max_attempts || 0,
      requeueDelay: params.requeue_ms || 0,
      heartbeatInterval: params.heartbeat_interval || 30,
      maxBackoffDuration: params.max_backoff || 0,
    }
    if (params.msg_timeout_ms) options.messageTimeout = params.msg_timeout_ms
    if (params.output_buffer_timeout) options.outputBufferTimeout = params.output_buffer_timeout
    reader = new nsq.Reader(params.topic, params.channel, options)
    reader.on('error', (err) => state.errors.push(String(err)))
    reader.on('nsqd_closed', () => {
      state.closes = (state.closes || 0) + 1
    })
    reader.on('discard', (msg) => {
      discarded.push(msgRecord(msg)) // nsqjs FINs discarded messages itself
      if (discarded.length === params.count) done()
    })
    reader.on('message', (msg) => {
      deliveries.push(msgRecord(msg))
      if (mode === 'requeue' && msg.attempts === 1) return msg.requeue(params.requeue_ms || 0, false)
      if (mode === 'always_requeue') return msg.requeue(0, false)
      if (mode === 'timeout' && msg.attempts === 1) return undefined
      if (mode === 'touch') {
        const ticker = setInterval(() => {
          counters.touches += 1
          msg.touch()
        }, (params.touch_every || 0.3) * 1000)
        setTimeout(() => {
          clearInterval(ticker)
          msg.finish()
          finishedOne()
        }, params.hold * 1000)
        return undefined
      }
      if (mode === 'window') {
        held.push(msg)
        counters.max_held = Math.max(counters.max_held, held.length)
        if (flushTimer) clearTimeout(flushTimer)
        if (held.length >= params.max_in_flight) flush()
        else flushTimer = setTimeout(flush, (params.quiet || 0.4) * 1000)
        return undefined
      }
      msg.finish()
      finishedOne()
      return undefined
    })
    if (mode === 'idle_then_publish') {
      // Stay idle past 2x the heartbeat interval (nsqd's read deadline), then publish.
      reader.on('nsqd_connected', () => {
        setTimeout(async () => {
          state.closes_before_publish = state.closes || 0
          const writer = await connectWriter()
          await publishOne(writer, (cb) => writer.publish(params.topic, 'after-idle', cb))
          writer.close()
        }, params.idle * 1000)
      })
    }
    reader.connect()
  })
}

// A Reader that finds its nsqd through lookupdHTTPAddresses only. FINs everything; once
// params.count arrived it PUBs params.late_bodies over HTTP to params.late_http (an nsqd
// that did not have the topic) and waits for those too (found on a later lookupd poll).
function scLookupdConsume() {
  const http = require('http')
  const late = (params.late_bodies || []).map((b) => Buffer.from(b, 'base64'))
  const total = params.count + late.length
  const deliveries = []
  state.deliveries = deliveries
  const connections = new Set()

  function post(body) {
    const [host, port] = hostPort(params.late_http)
    return new Promise((resolve, reject) => {
      const req = http.request(
        {host, port, method: 'POST', path: `/pub?topic=${params.topic}`},
        (res) => {
          res.resume()
          res.on('end', () => (res.statusCode === 200 ? resolve() : reject(new Error(`pub ${res.statusCode}`))))
        }
      )
      req.on('error', reject)
      req.end(body)
    })
  }

  return new Promise((resolve, reject) => {
    const reader = new nsq.Reader(params.topic, params.channel, {
      lookupdHTTPAddresses: params.lookupd,
      lookupdPollInterval: params.poll_interval || 1,
      maxInFlight: params.max_in_flight || 10,
    })
    reader.on('error', (err) => state.errors.push(String(err)))
    reader.on('nsqd_connected', (host, port) => connections.add(`${host}:${port}`))
    reader.on('message', (msg) => {
      deliveries.push(msgRecord(msg))
      msg.finish()
      if (deliveries.length === params.count && late.length) {
        ;(async () => {
          for (const body of late) await post(body)
          state.late_published_at = now()
        })().catch(reject)
      }
      if (deliveries.length === total) {
        setTimeout(() => {
          reader.close()
          resolve({deliveries, connections: [...connections].sort()})
        }, (params.linger || 0.2) * 1000)
      }
    })
    reader.connect()
  })
}

const SCENARIOS = {
  publish: scPublish,
  publish_error: scPublishError,
  consume: scConsume,
  lookupd_consume: scLookupdConsume,
}

async function main() {
  try {
    const result = await SCENARIOS[scenario]()
    emit({ok: true, ...state, ...result}, 0)
  } catch (err) {
    emit({ok: false, error: String(err), stack: err && err.stack, ...state}, 4)
  }
}

main()
