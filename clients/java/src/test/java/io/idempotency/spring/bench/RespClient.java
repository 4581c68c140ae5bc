package io.idempotency.spring.bench;

import java.io.BufferedInputStream;
import java.io.ByteArrayOutputStream;
import java.io.IOException;
import java.io.InputStream;
import java.io.OutputStream;
import java.net.Socket;
import java.nio.charset.StandardCharsets;

/**
 * The smallest Redis client the lock needs (Debian packages no Java Redis
 * client): one connection, commands as RESP arrays of bulk strings, replies
 * read as simple strings, integers, bulk strings or nil. Not thread-safe:
 * one per thread.
 */
final class RespClient implements AutoCloseable {

    private final Socket socket;
    private final OutputStream out;
    private final InputStream in;

    RespClient(String host, int port) throws IOException {
        socket = new Socket(host, port);
        socket.setTcpNoDelay(true);
        out = socket.getOutputStream();
        in = new BufferedInputStream(socket.getInputStream());
    }

    /** Sends one command; returns its reply: String, Long, or null for nil. */
    Object call(String... args) throws IOException {
        ByteArrayOutputStream cmd = new ByteArrayOutputStream();
        write(cmd, "*" + args.length + "\r\n");
        for (String arg : args) {
            byte[] bytes = arg.getBytes(StandardCharsets.UTF_8);
            write(cmd, "$" + bytes.length + "\r\n");
            cmd.write(bytes);
            write(cmd, "\r\n");
        }
        cmd.writeTo(out);
        out.flush();
        return reply();
    }

    private Object reply() throws IOException {
        int type = in.read();
        String line = line();
        switch (type) {
            case '+':
                return line;
            case ':':
                return Long.parseLong(line);
            case '$': {
                int length = Integer.parseInt(line);
                if (length < 0) {
                    return null;
                }
                byte[] bytes = new byte[length + 2];
                int read = 0;
                while (read < bytes.length) {
                    int n = in.read(bytes, read, bytes.length - read);
                    if (n < 0) {
                        throw new IOException("redis closed the connection");
                    }
                    read += n;
                }
                return new String(bytes, 0, length, StandardCharsets.UTF_8);
            }
            case '-':
                throw new IOException("redis: " + line);
            default:
                throw new IOException("unexpected redis reply type " + type);
        }
    }

    private String line() throws IOException {
        StringBuilder sb = new StringBuilder();
        for (int c = in.read(); c != '\r'; c = in.read()) {
            if (c < 0) {
                throw new IOException("redis closed the connection");
            }
            sb.append((char) c);
        }
        in.read();   // '\n'
        return sb.toString();
    }

    private static void write(ByteArrayOutputStream buf, String s) {
        byte[] bytes = s.getBytes(StandardCharsets.US_ASCII);
        buf.write(bytes, 0, bytes.length);
    }

    @Override
    public void close() throws IOException {
        socket.close();
    }
}
