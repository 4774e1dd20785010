-- Step 2 only copied rows step 1's down drops with their table.
SELECT 1;
