<?php

namespace PhpWorker;

/**
 * A task that failed, timed out or was refused. Under php_worker this class is the
 * server's own (php_worker_task() throws it, and the autoloader never loads this
 * file); this definition serves code that names it where php_worker does not run.
 */
class TaskException extends \RuntimeException
{
}
