// The ORM test application as a process of its own (the storm and kill -9
// tests): node test/orm/prisma-server.js DSN -> prints its URL, serves until killed.
import { listenOrm } from './prisma-app.js';

const app = await listenOrm(process.argv[2]);
console.log(app.url);
