package io.idempotency.spring;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.File;
import java.io.IOException;
import java.lang.reflect.InvocationTargetException;
import java.lang.reflect.Method;
import java.net.URL;
import java.net.URLClassLoader;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.UUID;
import java.util.regex.Matcher;
import java.util.regex.Pattern;

import javax.tools.DiagnosticCollector;
import javax.tools.JavaCompiler;
import javax.tools.JavaFileObject;
import javax.tools.StandardJavaFileManager;
import javax.tools.ToolProvider;

import io.idempotency.spring.example.DatabaseBeans;

import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;
import org.springframework.context.annotation.AnnotationConfigApplicationContext;
import org.springframework.jdbc.core.JdbcTemplate;

/**
 * The README's Java blocks run as printed: each ```java block after a line
 * {@code <!-- tested by ReadmeTest -->} is compiled (its public type names
 * the file), its configuration class and service are started in a Spring
 * context on the test database, and the service is called as the README
 * says: the first call runs, the duplicate replays, another amount under
 * the key is refused, a scope that gives nothing is refused.
 */
class ReadmeTest {

    private static final Pattern TESTED_BLOCK =
            Pattern.compile("<!-- tested by ReadmeTest -->\n```java\n(.*?)\n```", Pattern.DOTALL);
    private static final Pattern PUBLIC_TYPE = Pattern.compile("^public (?:class|interface) (\\w+)", Pattern.MULTILINE);

    private static List<String> testedBlocks() throws IOException {
        String readme = new String(Files.readAllBytes(Paths.get("README.md")), StandardCharsets.UTF_8);
        List<String> blocks = new ArrayList<>();
        Matcher m = TESTED_BLOCK.matcher(readme);
        while (m.find()) {
            blocks.add(m.group(1));
        }
        return blocks;
    }

    /** Compiles the blocks into dir; returns the public type each declares. */
    private static List<String> compile(List<String> blocks, Path dir) throws IOException {
        List<String> types = new ArrayList<>();
        List<File> sources = new ArrayList<>();
        for (String block : blocks) {
            Matcher m = PUBLIC_TYPE.matcher(block);
            assertTrue(m.find(), "a tested block declares a public type:\n" + block);
            types.add(m.group(1));
            Path source = dir.resolve(m.group(1) + ".java");
            Files.write(source, block.getBytes(StandardCharsets.UTF_8));
            sources.add(source.toFile());
        }
        JavaCompiler javac = ToolProvider.getSystemJavaCompiler();
        DiagnosticCollector<JavaFileObject> diagnostics = new DiagnosticCollector<>();
        try (StandardJavaFileManager files = javac.getStandardFileManager(diagnostics, null, StandardCharsets.UTF_8)) {
            boolean ok = javac.getTask(null, files, diagnostics,
                    Arrays.asList("-classpath", System.getProperty("java.class.path"), "-parameters",
                                  "-d", dir.toString()),
                    null, files.getJavaFileObjectsFromFiles(sources)).call();
            assertTrue(ok, "the README's blocks compile: " + diagnostics.getDiagnostics());
        }
        return types;
    }

    @Test
    void theReadmeSetupAndServiceRunAsPrinted(@TempDir Path dir) throws Exception {
        List<String> blocks = testedBlocks();
        assertEquals(2, blocks.size(), "the README has the two tested blocks (setup, service)");
        List<String> types = compile(blocks, dir);

        try (URLClassLoader loader = new URLClassLoader(new URL[] {dir.toUri().toURL()}, getClass().getClassLoader());
             AnnotationConfigApplicationContext context = new AnnotationConfigApplicationContext()) {
            context.setClassLoader(loader);
            context.register(DatabaseBeans.class);    // the application's DataSource and transaction manager
            for (String type : types) {
                Class<?> cls = loader.loadClass(type);
                if (!cls.isInterface()) {
                    context.register(cls);
                }
            }
            context.refresh();
            JdbcTemplate jdbc = context.getBean(JdbcTemplate.class);
            jdbc.execute("CREATE TABLE IF NOT EXISTS payments (id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,"
                    + " account text NOT NULL, amount bigint NOT NULL)");

            Class<?> payments = loader.loadClass("Payments");
            Object service = context.getBean(payments);
            Method pay = payments.getMethod("pay", String.class, String.class, long.class);
            pay.setAccessible(true);    // the README's interface is package-private (one public type per block)
            String key = "readme-" + UUID.randomUUID();

            Object id = pay.invoke(service, "alice", key, 100L);
            assertEquals(id, pay.invoke(service, "alice", key, 100L), "the duplicate replays the first id");
            assertEquals(Integer.valueOf(1), jdbc.queryForObject(
                    "SELECT count(*) FROM payments WHERE account = 'alice' AND id = ?", Integer.class, id));
            assertEquals("succeeded", jdbc.queryForObject("SELECT status::text FROM idem_lookup(?, 'alice')",
                                                          String.class, key));
            assertInstanceOf(IdempotencyKeyReusedException.class,
                    assertThrows(InvocationTargetException.class, () -> pay.invoke(service, "alice", key, 200L))
                            .getCause(), "another amount under the key");
            Object other = pay.invoke(service, "bob", key, 100L);
            assertTrue(!other.equals(id), "the same key in another principal's scope is another key");
            assertInstanceOf(IdempotencyScopeMissingException.class,
                    assertThrows(InvocationTargetException.class, () -> pay.invoke(service, null, key, 100L))
                            .getCause(), "no principal");
        }
    }
}
