package io.idempotency.spring;

import java.lang.reflect.Method;

import com.fasterxml.jackson.databind.DeserializationConfig;
import com.fasterxml.jackson.databind.JavaType;
import com.fasterxml.jackson.databind.JsonMappingException;
import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.deser.DeserializerFactory;

/**
 * A replay is read back from JSON as the method's declared return type, so
 * that type must tell Jackson the concrete class: {@code Object} (also as a
 * type argument, a wildcard or an unresolved type variable) would come back
 * as a LinkedHashMap, list, string or number instead of what the method
 * returned, and an interface or abstract class without a mapping or type
 * information cannot be read back at all. Such declarations are refused.
 */
final class ReplayableReturnType {

    private ReplayableReturnType() {
    }

    /** Throws IllegalStateException naming the method and the type Jackson cannot read back. */
    static void check(ObjectMapper mapper, Method method) {
        JavaType declared = mapper.getTypeFactory().constructType(method.getGenericReturnType());
        String unreadable = unreadable(mapper, declared);
        if (unreadable != null) {
            throw new IllegalStateException("@Idempotent " + method.getDeclaringClass().getName() + "."
                    + method.getName() + ": its return type " + declared.toCanonical() + " contains " + unreadable
                    + ", which a replay cannot read back as what the method returned; declare a concrete type"
                    + " (JsonNode for free-form JSON)");
        }
    }

    private static String unreadable(ObjectMapper mapper, JavaType type) {
        Class<?> raw = type.getRawClass();
        if (raw == Object.class) {
            return "java.lang.Object";
        }
        boolean abstractBean = type.isAbstract() && !raw.isPrimitive() && !type.isContainerType()
                && !JsonNode.class.isAssignableFrom(raw);
        if (abstractBean && !concreteOrTyped(mapper, type)) {
            return raw.getName();
        }
        if (type.getContentType() != null) {                // collections, maps, arrays
            String content = unreadable(mapper, type.getContentType());
            if (content != null) {
                return content;
            }
        }
        if (type.getKeyType() != null) {
            String key = unreadable(mapper, type.getKeyType());
            if (key != null) {
                return key;
            }
        }
        for (JavaType argument : type.getBindings().getTypeParameters()) {
            String inner = unreadable(mapper, argument);
            if (inner != null) {
                return inner;
            }
        }
        return null;
    }

    /** The mapper maps the abstract type to a concrete one, or reads its type from the JSON. */
    private static boolean concreteOrTyped(ObjectMapper mapper, JavaType type) {
        DeserializationConfig config = mapper.getDeserializationConfig();
        DeserializerFactory factory = mapper.getDeserializationContext().getFactory();
        try {
            return !factory.mapAbstractType(config, type).equals(type)
                    || factory.findTypeDeserializer(config, type) != null;
        } catch (JsonMappingException e) {
            return false;
        }
    }
}
