// The Express 5 test application as a process of its own, for the test that
// kills it: node test/server.js DSN -> prints its URL, serves until killed.
import pg from 'pg';
import { listen } from './app.js';

const pool = new pg.Pool({ connectionString: process.argv[2], max: 10 });
const app = await listen('express5', { pool });
console.log(app.url);
