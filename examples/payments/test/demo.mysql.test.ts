import { execFile } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import mysql from 'mysql2/promise';
import { expect, it } from 'vitest';

const DEMO = fileURLToPath(new URL('../dist/demo.js', import.meta.url));
const MYSQL_URL = process.env.MYSQL_URL ?? 'mysql://root@127.0.0.1:3306/test';

async function reachable(): Promise<boolean> {
  try {
    const connection = await mysql.createConnection({ uri: MYSQL_URL, connectTimeout: 3000 });
    await connection.end();
    return true;
  } catch (error) {
    if (process.env.CI === 'true') throw error;
    return false;
  }
}

it.skipIf(!(await reachable()))(
  'npm run demo -- --store-url mysql://...: the Oncely consumer on MariaDB charges each order once',
  async () => {
    const { stdout } = await promisify(execFile)(process.execPath, [
      DEMO,
      '--messages',
      '150',
      '--store-url',
      MYSQL_URL,
    ]);
    expect(stdout).toMatch(/the consumers' store: the MySQL store \(@oncely\/mysql\)/);
    expect(stdout).toMatch(/OK: Oncely charged each order once\./);
    expect(stdout).toMatch(/overcharge\s+\$[\d,.]+\s+\$0\.00/);
  },
);
