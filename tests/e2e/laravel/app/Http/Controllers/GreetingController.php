<?php

namespace App\Http\Controllers;

use Illuminate\Http\Request;

// Greets by ?name=. The debugging test (tests/e2e/test_debug.py) stops a DBGp session
// on the line marked below.
class GreetingController
{
    public function show(Request $request): array
    {
        $name = (string) $request->query('name', 'nobody');
        $greeting = "hello $name"; // breakpoint
        return ['greeting' => $greeting, 'boot' => app()->bound('boot_id') ? app('boot_id') : null];
    }
}
