// prisma generate for the tests' schema (into test/orm/generated/prisma).
// Only the npm registry is reachable here: the schema engine, which serves
// migrations only, is never downloaded when PRISMA_SCHEMA_ENGINE_BINARY
// names an executable; the client needs no engine binary (driver adapter).
import { execFileSync } from 'node:child_process';

const dir = new URL('../..', import.meta.url).pathname;
export function generatePrisma() {
  execFileSync(`${dir}node_modules/.bin/prisma`, ['generate', '--schema', 'test/orm/schema.prisma'], {
    cwd: dir,
    env: {
      ...process.env, PRISMA_SCHEMA_ENGINE_BINARY: '/bin/true', CHECKPOINT_DISABLE: '1', PRISMA_HIDE_UPDATE_MESSAGE: '1',
    },
    stdio: ['ignore', 'ignore', 'inherit'],
  });
}
