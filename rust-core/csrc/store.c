/*
 * The php_worker_local_* and php_worker_shared_* functions: their arguments, and PHP
 * values encoded into bytes for the Rust stores (src/runtime/store.rs) and decoded back.
 *
 * The encoding (native byte order; only this file reads it) is a tag byte, then:
 *   'N' null, 'T' true, 'F' false, 'I' a zend_long, 'D' a double,
 *   'S' a size_t length and the bytes,
 *   'A' a size_t count, then count (key, value) pairs; a key is 'i' and a zend_long,
 *       or 's', a size_t length and the bytes,
 *   'O' a size_t length and the output of serialize() (objects).
 * A top-level integer is not encoded: it goes to Rust as an integer, so increment can
 * work on it under the store's lock.
 *
 * Everything that makes PHP values (and so can bail out on memory_limit) runs here, with
 * no Rust frame on the stack and no store lock held.
 */
#include <php.h>
#include <SAPI.h>
#include <zend_smart_str.h>
#include <zend_exceptions.h>
#include <zend_closures.h>
#include <ext/standard/php_var.h>

#include "shim.h"

#define PW_STORE_MAX_KEY 250
#define PW_STORE_MAX_DEPTH 256

static bool pw_store_key_ok(zend_string *key)
{
	if (ZSTR_LEN(key) == 0 || ZSTR_LEN(key) > PW_STORE_MAX_KEY) {
		zend_argument_value_error(1, "must be a non-empty string of at most %d bytes", PW_STORE_MAX_KEY);
		return false;
	}
	return true;
}

static void pw_append_size(smart_str *buf, size_t n)
{
	smart_str_appendl(buf, (const char *)&n, sizeof n);
}

/* Encodes *zv into buf; false with an exception thrown when it cannot be stored. */
static bool pw_encode(smart_str *buf, zval *zv, zend_string *key, int depth)
{
	ZVAL_DEREF(zv);
	if (depth > PW_STORE_MAX_DEPTH) {
		zend_argument_value_error(2, "is nested too deeply to be stored (key \"%s\")", ZSTR_VAL(key));
		return false;
	}
	switch (Z_TYPE_P(zv)) {
	case IS_NULL:
		smart_str_appendc(buf, 'N');
		return true;
	case IS_FALSE:
		smart_str_appendc(buf, 'F');
		return true;
	case IS_TRUE:
		smart_str_appendc(buf, 'T');
		return true;
	case IS_LONG:
		smart_str_appendc(buf, 'I');
		smart_str_appendl(buf, (const char *)&Z_LVAL_P(zv), sizeof(zend_long));
		return true;
	case IS_DOUBLE:
		smart_str_appendc(buf, 'D');
		smart_str_appendl(buf, (const char *)&Z_DVAL_P(zv), sizeof(double));
		return true;
	case IS_STRING:
		smart_str_appendc(buf, 'S');
		pw_append_size(buf, Z_STRLEN_P(zv));
		smart_str_appendl(buf, Z_STRVAL_P(zv), Z_STRLEN_P(zv));
		return true;
	case IS_ARRAY: {
		zend_ulong index;
		zend_string *name;
		zval *item;
		smart_str_appendc(buf, 'A');
		pw_append_size(buf, zend_hash_num_elements(Z_ARRVAL_P(zv)));
		ZEND_HASH_FOREACH_KEY_VAL(Z_ARRVAL_P(zv), index, name, item) {
			if (name) {
				smart_str_appendc(buf, 's');
				pw_append_size(buf, ZSTR_LEN(name));
				smart_str_appendl(buf, ZSTR_VAL(name), ZSTR_LEN(name));
			} else {
				zend_long i = (zend_long)index;
				smart_str_appendc(buf, 'i');
				smart_str_appendl(buf, (const char *)&i, sizeof i);
			}
			if (!pw_encode(buf, item, key, depth + 1)) {
				return false;
			}
		} ZEND_HASH_FOREACH_END();
		return true;
	}
	case IS_OBJECT: {
		if (Z_OBJCE_P(zv) == zend_ce_closure) {
			zend_argument_type_error(2, "cannot be stored: it holds a Closure (key \"%s\")", ZSTR_VAL(key));
			return false;
		}
		php_serialize_data_t var_hash;
		smart_str serialized = {0};
		PHP_VAR_SERIALIZE_INIT(var_hash);
		php_var_serialize(&serialized, zv, &var_hash);
		PHP_VAR_SERIALIZE_DESTROY(var_hash);
		if (EG(exception)) {
			smart_str_free(&serialized);
			return false;
		}
		size_t len = serialized.s ? ZSTR_LEN(serialized.s) : 0;
		smart_str_appendc(buf, 'O');
		pw_append_size(buf, len);
		if (len) {
			smart_str_appendl(buf, ZSTR_VAL(serialized.s), len);
		}
		smart_str_free(&serialized);
		return true;
	}
	default:
		zend_argument_type_error(2, "cannot be stored: it holds a %s (key \"%s\")", zend_zval_type_name(zv),
		                         ZSTR_VAL(key));
		return false;
	}
}

typedef struct {
	const char *p;
	const char *end;
} pw_reader;

static bool pw_read(pw_reader *r, void *into, size_t n)
{
	if ((size_t)(r->end - r->p) < n) {
		return false;
	}
	memcpy(into, r->p, n);
	r->p += n;
	return true;
}

static bool pw_read_size(pw_reader *r, size_t *n)
{
	return pw_read(r, n, sizeof *n) && *n <= (size_t)(r->end - r->p);
}

/* Decodes one value into *out (left undefined on failure). */
static bool pw_decode(pw_reader *r, zval *out, int depth)
{
	char tag;
	if (depth > PW_STORE_MAX_DEPTH || !pw_read(r, &tag, 1)) {
		return false;
	}
	switch (tag) {
	case 'N':
		ZVAL_NULL(out);
		return true;
	case 'F':
		ZVAL_FALSE(out);
		return true;
	case 'T':
		ZVAL_TRUE(out);
		return true;
	case 'I': {
		zend_long n;
		if (!pw_read(r, &n, sizeof n)) {
			return false;
		}
		ZVAL_LONG(out, n);
		return true;
	}
	case 'D': {
		double d;
		if (!pw_read(r, &d, sizeof d)) {
			return false;
		}
		ZVAL_DOUBLE(out, d);
		return true;
	}
	case 'S': {
		size_t len;
		if (!pw_read_size(r, &len)) {
			return false;
		}
		ZVAL_STRINGL_FAST(out, r->p, len);
		r->p += len;
		return true;
	}
	case 'A': {
		size_t count;
		if (!pw_read(r, &count, sizeof count)) {
			return false;
		}
		array_init_size(out, (uint32_t)MIN(count, 1 << 16));
		for (size_t i = 0; i < count; i++) {
			char key_tag;
			zend_long index = 0;
			size_t len = 0;
			const char *name = NULL;
			zval item;
			if (!pw_read(r, &key_tag, 1)) {
				goto fail;
			}
			if (key_tag == 'i') {
				if (!pw_read(r, &index, sizeof index)) {
					goto fail;
				}
			} else if (key_tag == 's' && pw_read_size(r, &len)) {
				name = r->p;
				r->p += len;
			} else {
				goto fail;
			}
			if (!pw_decode(r, &item, depth + 1)) {
				goto fail;
			}
			if (name) {
				zend_hash_str_update(Z_ARRVAL_P(out), name, len, &item);
			} else {
				zend_hash_index_update(Z_ARRVAL_P(out), (zend_ulong)index, &item);
			}
		}
		return true;
fail:
		zval_ptr_dtor(out);
		return false;
	}
	case 'O': {
		size_t len;
		if (!pw_read_size(r, &len)) {
			return false;
		}
		const unsigned char *p = (const unsigned char *)r->p;
		php_unserialize_data_t var_hash;
		PHP_VAR_UNSERIALIZE_INIT(var_hash);
		bool ok = php_var_unserialize(out, &p, p + len, &var_hash);
		PHP_VAR_UNSERIALIZE_DESTROY(var_hash);
		r->p += len;
		if (!ok) {
			zval_ptr_dtor(out);
		}
		return ok;
	}
	default:
		return false;
	}
}

static void pw_store_get(INTERNAL_FUNCTION_PARAMETERS, bool shared)
{
	zend_string *key;
	zval *fallback = NULL;

	ZEND_PARSE_PARAMETERS_START(1, 2)
		Z_PARAM_STR(key)
		Z_PARAM_OPTIONAL
		Z_PARAM_ZVAL(fallback)
	ZEND_PARSE_PARAMETERS_END();

	if (!pw_store_key_ok(key)) {
		RETURN_THROWS();
	}
	pw_store_value v = {0};
	if (!pw_rs_store_get(shared, ZSTR_VAL(key), ZSTR_LEN(key), &v)) {
		if (fallback) {
			RETURN_COPY(fallback);
		}
		RETURN_NULL();
	}
	if (v.kind == PW_STORE_INT) {
		RETURN_LONG(v.integer);
	}
	/* The bytes are the thread's buffer, which a store call made while an object is
	 * unserialized (__wakeup, __unserialize) would overwrite: decode a copy, unless the
	 * value is a plain string, whose decoding runs no PHP code. */
	zend_string *copy = NULL;
	pw_reader r = { (const char *)v.data, (const char *)v.data + v.len };
	if (v.len == 0 || *r.p != 'S') {
		copy = zend_string_init((const char *)v.data, v.len, 0);
		r.p = ZSTR_VAL(copy);
		r.end = ZSTR_VAL(copy) + ZSTR_LEN(copy);
	}
	bool ok = pw_decode(&r, return_value, 0);
	if (copy) {
		zend_string_release(copy);
	}
	if (!ok) {
		ZVAL_NULL(return_value);
		if (!EG(exception)) {
			zend_throw_error(NULL, "%s(): the value of key \"%s\" could not be restored", get_active_function_name(),
			                 ZSTR_VAL(key));
		}
	}
}

static void pw_store_put(INTERNAL_FUNCTION_PARAMETERS, bool shared, bool add)
{
	zend_string *key;
	zval *value;
	zend_long ttl = 0;

	ZEND_PARSE_PARAMETERS_START(2, 3)
		Z_PARAM_STR(key)
		Z_PARAM_ZVAL(value)
		Z_PARAM_OPTIONAL
		Z_PARAM_LONG(ttl)
	ZEND_PARSE_PARAMETERS_END();

	if (!pw_store_key_ok(key)) {
		RETURN_THROWS();
	}
	if (ttl < 0) {
		zend_argument_value_error(3, "must be greater than or equal to 0");
		RETURN_THROWS();
	}
	pw_store_value v = {0};
	smart_str buf = {0};
	ZVAL_DEREF(value);
	if (Z_TYPE_P(value) == IS_LONG) {
		v.kind = PW_STORE_INT;
		v.integer = Z_LVAL_P(value);
	} else {
		if (!pw_encode(&buf, value, key, 0)) {
			smart_str_free(&buf);
			RETURN_THROWS();
		}
		v.kind = PW_STORE_ENCODED;
		v.data = (const uint8_t *)ZSTR_VAL(buf.s);
		v.len = ZSTR_LEN(buf.s);
	}
	int32_t rc = pw_rs_store_put(shared, ZSTR_VAL(key), ZSTR_LEN(key), &v, (int64_t)ttl, add);
	smart_str_free(&buf);
	RETURN_BOOL(rc == PW_STORE_STORED);
}

static void pw_store_increment(INTERNAL_FUNCTION_PARAMETERS, bool shared)
{
	zend_string *key;
	zend_long by = 1;

	ZEND_PARSE_PARAMETERS_START(1, 2)
		Z_PARAM_STR(key)
		Z_PARAM_OPTIONAL
		Z_PARAM_LONG(by)
	ZEND_PARSE_PARAMETERS_END();

	if (!pw_store_key_ok(key)) {
		RETURN_THROWS();
	}
	int64_t result;
	if (pw_rs_store_increment(shared, ZSTR_VAL(key), ZSTR_LEN(key), (int64_t)by, &result) != PW_INCREMENT_OK) {
		RETURN_FALSE;
	}
	RETURN_LONG((zend_long)result);
}

static void pw_store_forget(INTERNAL_FUNCTION_PARAMETERS, bool shared)
{
	zend_string *key;

	ZEND_PARSE_PARAMETERS_START(1, 1)
		Z_PARAM_STR(key)
	ZEND_PARSE_PARAMETERS_END();

	if (!pw_store_key_ok(key)) {
		RETURN_THROWS();
	}
	RETURN_BOOL(pw_rs_store_forget(shared, ZSTR_VAL(key), ZSTR_LEN(key)));
}

static void pw_store_touch(INTERNAL_FUNCTION_PARAMETERS, bool shared)
{
	zend_string *key;
	zend_long ttl;

	ZEND_PARSE_PARAMETERS_START(2, 2)
		Z_PARAM_STR(key)
		Z_PARAM_LONG(ttl)
	ZEND_PARSE_PARAMETERS_END();

	if (!pw_store_key_ok(key)) {
		RETURN_THROWS();
	}
	RETURN_BOOL(pw_rs_store_touch(shared, ZSTR_VAL(key), ZSTR_LEN(key), (int64_t)ttl));
}

static void pw_store_flush(INTERNAL_FUNCTION_PARAMETERS, bool shared)
{
	ZEND_PARSE_PARAMETERS_NONE();
	pw_rs_store_flush(shared);
	RETURN_TRUE;
}

static void pw_store_count(INTERNAL_FUNCTION_PARAMETERS, bool shared)
{
	ZEND_PARSE_PARAMETERS_NONE();
	RETURN_LONG((zend_long)pw_rs_store_count(shared));
}

#define PW_STORE_FUNCTIONS(scope, shared)                                                                    \
	void pw_php_##scope##_get(INTERNAL_FUNCTION_PARAMETERS)                                               \
	{                                                                                                      \
		pw_store_get(INTERNAL_FUNCTION_PARAM_PASSTHRU, shared);                                           \
	}                                                                                                      \
	void pw_php_##scope##_put(INTERNAL_FUNCTION_PARAMETERS)                                               \
	{                                                                                                      \
		pw_store_put(INTERNAL_FUNCTION_PARAM_PASSTHRU, shared, false);                                    \
	}                                                                                                      \
	void pw_php_##scope##_add(INTERNAL_FUNCTION_PARAMETERS)                                               \
	{                                                                                                      \
		pw_store_put(INTERNAL_FUNCTION_PARAM_PASSTHRU, shared, true);                                     \
	}                                                                                                      \
	void pw_php_##scope##_increment(INTERNAL_FUNCTION_PARAMETERS)                                         \
	{                                                                                                      \
		pw_store_increment(INTERNAL_FUNCTION_PARAM_PASSTHRU, shared);                                     \
	}                                                                                                      \
	void pw_php_##scope##_forget(INTERNAL_FUNCTION_PARAMETERS)                                            \
	{                                                                                                      \
		pw_store_forget(INTERNAL_FUNCTION_PARAM_PASSTHRU, shared);                                        \
	}                                                                                                      \
	void pw_php_##scope##_touch(INTERNAL_FUNCTION_PARAMETERS)                                             \
	{                                                                                                      \
		pw_store_touch(INTERNAL_FUNCTION_PARAM_PASSTHRU, shared);                                         \
	}                                                                                                      \
	void pw_php_##scope##_flush(INTERNAL_FUNCTION_PARAMETERS)                                             \
	{                                                                                                      \
		pw_store_flush(INTERNAL_FUNCTION_PARAM_PASSTHRU, shared);                                         \
	}                                                                                                      \
	void pw_php_##scope##_count(INTERNAL_FUNCTION_PARAMETERS)                                             \
	{                                                                                                      \
		pw_store_count(INTERNAL_FUNCTION_PARAM_PASSTHRU, shared);                                         \
	}

PW_STORE_FUNCTIONS(local, false)
PW_STORE_FUNCTIONS(shared, true)
