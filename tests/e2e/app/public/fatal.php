<?php
echo "before the error\n";
this_function_does_not_exist();
