<?php

use Illuminate\Database\Migrations\Migration;
use Illuminate\Database\Schema\Blueprint;
use Illuminate\Support\Facades\DB;
use Illuminate\Support\Facades\Schema;

class CreateNotesTable extends Migration
{
    public function up()
    {
        Schema::create('notes', function (Blueprint $table) {
            $table->id();
            $table->string('body');
        });
        DB::table('notes')->insert(['body' => 'migrated by ' . PHP_SAPI]);
    }

    public function down()
    {
        Schema::dropIfExists('notes');
    }
}
