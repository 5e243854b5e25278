/*
 * A request's start and end, the parts both cycles share (the full one of script.c, the
 * trimmed one of a worker's request in worker_request.c): the request info PHP reads
 * (SG(request_info), SG(server_context)) filled and cleared, the body's state around
 * startup and shutdown, and the php_worker module's hooks at the end of every request.
 * C because these are PHP's SAPI, core and session globals, which only PHP's macros
 * reach. See shim.h.
 */
#include <php.h>
#include <SAPI.h>
#include <php_main.h>
#include <ext/session/php_session.h>

#include "shim.h"

void pw_fill_request_info(const pw_shim_request *req)
{
	SG(server_context) = req->ctx;
	SG(sapi_headers).http_response_code = 200;
	SG(request_info).request_method = req->method;
	SG(request_info).request_uri = (char *)req->request_uri;
	SG(request_info).query_string = (char *)req->query_string;
	SG(request_info).content_type = req->content_type;
	SG(request_info).content_length = req->content_length < 0 ? 0 : req->content_length;
	SG(request_info).path_translated = (char *)req->path_translated;
	SG(request_info).argc = req->argc;
	SG(request_info).argv = (char **)req->argv;
	pw_crash_trail_request(req->script_filename);
	SG(request_info).auth_user = NULL;
	SG(request_info).auth_password = NULL;
	SG(request_info).auth_digest = NULL;
	php_handle_auth_data(req->authorization);
}

void pw_clear_request_info(void)
{
	SG(request_info).request_method = NULL;
	SG(request_info).request_uri = NULL;
	SG(request_info).query_string = NULL;
	SG(request_info).content_type = NULL;
	SG(request_info).path_translated = NULL;
	SG(request_info).cookie_data = NULL;
	SG(request_info).argc = 0;
	SG(request_info).argv = NULL;
	SG(server_context) = NULL;
	pw_crash_trail_request(NULL);
}

/* PHP would read and discard a body the script never read (a PUT it ignored), through
 * the client, on this thread. Go's server discards or closes for us, and a failed read
 * there must not turn a finished response into a 408. */
void pw_skip_body_drain(void)
{
	SG(post_read) = 1;
}

/* PHP parsed the body of a form or upload (sapi_activate reads it) and the client
 * stopped sending, so the connection is already aborted before the script printed
 * anything. */
bool pw_body_failed_at_startup(void)
{
	return (PG(connection_status) & PHP_CONNECTION_ABORTED) != 0;
}

/* A session whose save handler failed (a timeout or a fatal error inside a user handler
 * that delegates to PHP's files handler, as Symfony's does) is left open by the
 * session's request shutdown: PHP refuses to call a handler again from inside one, so
 * the user close never runs, and the files handler's descriptor, with its flock, would
 * stay open in this thread for good, locking that session for every later request.
 * Closed here with the module that opened it, after the session's request shutdown and
 * while the request's memory is still there. */
void pw_session_release_leaked(void)
{
	if (!PS(mod_data) || !PS(mod)) {
		return;
	}
	const ps_module *owner = strcmp(PS(mod)->s_name, "user") == 0 ? PS(default_mod) : PS(mod);
	if (owner && owner->s_close) {
		zend_try {
			owner->s_close(&PS(mod_data));
		} zend_end_try();
	}
	PS(mod_data) = NULL;
	PS(mod_user_is_open) = 0;
}

/* The module's request shutdown: a php_worker_on_stop() callback is request memory. */
int pw_shim_request_shutdown(int type, int module_number)
{
	pw_stop_callback_release();
	return SUCCESS;
}

/* After every module's request shutdown (the session's included), before PHP frees the
 * request's memory. */
int pw_shim_post_deactivate(void)
{
	pw_session_release_leaked();
	return SUCCESS;
}
