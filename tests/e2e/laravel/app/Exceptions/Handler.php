<?php

namespace App\Exceptions;

use Throwable;

// Errors as JSON (message, class, file, line, trace: app.debug is on), with no views.
class Handler extends \Illuminate\Foundation\Exceptions\Handler
{
    protected function shouldReturnJson($request, Throwable $e)
    {
        return true;
    }
}
